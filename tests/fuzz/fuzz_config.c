/* libFuzzer target: config.json (DeepseekV3 / Kimi spellings: top-level or text_config keys,
 * rope_scaling or rope_parameters, type or rope_type, q_lora_rank null). An accepted config
 * must pass vkh2o_mla_config_validate and give finite derived numbers; a refused one must
 * leave the caller's config untouched. */
#include "fuzz_common.h"

#include <math.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const char* path = fuzz_file("config.json", data, size);
    vkh2o_mla_config c, before;
    vkh2o_mla_config_kimi_k26(&c);
    before = c;
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_mla_config_from_json(path, &c, &e);
    if (r != VKH2O_OK) {
        fuzz_check_error(r, &e, path);
        if (memcmp(&c, &before, sizeof c))
            fuzz_fail("a refused config changed the caller's struct");
        return 0;
    }
    if (vkh2o_mla_config_validate(&c, &e) != VKH2O_OK)
        fuzz_fail("accepted config fails validation: %s", e.message);
    float scale = vkh2o_mla_softmax_scale(&c);
    if (!isfinite(scale) || scale <= 0.0f)
        fuzz_fail("softmax scale %g", (double)scale);
    float inv_freq[2048], af = 0.0f;
    vkh2o_mla_rope_params(&c, inv_freq, &af);
    for (uint32_t i = 0; i < c.qk_rope_head_dim / 2; i++)
        if (isnan(inv_freq[i]))
            fuzz_fail("inv_freq[%u] is NaN", i);
    (void)vkh2o_mla_param_count(&c);
    return 0;
}
