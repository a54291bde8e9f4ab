/* vkh2o/kvquant.h — included by vkh2o.h; do not include directly. */
#ifndef VKH2O_KVQUANT_H
#define VKH2O_KVQUANT_H
#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
