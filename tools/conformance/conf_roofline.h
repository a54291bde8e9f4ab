/* vkh2o-conformance: this device's roofline, measured in the same run as the cases. */
#ifndef VKH2O_CONF_ROOFLINE_H
#define VKH2O_CONF_ROOFLINE_H
#include "vkh2o.h"

typedef struct conf_roofline {
    double read_gbps;          /* storage-buffer reads (read_probe, 64 MiB or the binding limit) */
    double read_texel_gbps;    /* the same through a uniform texel buffer (0: not available) */
    double gflops;             /* fp32 FMA throughput (fma_probe), FLOPs counted 2 per FMA */
    double dispatch_ms;        /* one dispatch of one invocation: the launch cost a kernel pays */
    uint64_t bytes;
} conf_roofline;

/* The fastest of `runs` timed probes after one warm-up each. UNSUPPORTED without timestamps. */
vkh2o_result conf_roofline_measure(vkh2o_context* ctx, uint32_t runs, conf_roofline* out);
#endif
