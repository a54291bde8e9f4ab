/* vkh2o/mla.h — included by vkh2o.h; do not include directly. */
#ifndef VKH2O_MLA_H
#define VKH2O_MLA_H
#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
