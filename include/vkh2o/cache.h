/* vkh2o/cache.h — included by vkh2o.h; do not include directly. */
#ifndef VKH2O_CACHE_H
#define VKH2O_CACHE_H
#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
