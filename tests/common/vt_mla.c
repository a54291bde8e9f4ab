/* Test harness: the small MLA shapes of the layer suites. */
#include "vkh2o_test.h"

vkh2o_mla_config vt_small_mla_config(uint32_t hidden, uint32_t q_lora, uint32_t kv_lora)
{
    vkh2o_mla_config c;
    vkh2o_mla_config_kimi_k26(&c);   /* YaRN and its softmax scale */
    c.hidden_size = hidden;
    c.num_heads = 3;
    c.q_lora_rank = q_lora;
    c.kv_lora_rank = kv_lora;
    c.qk_nope_head_dim = 16;
    c.qk_rope_head_dim = 8;
    c.v_head_dim = 12;
    return c;
}
