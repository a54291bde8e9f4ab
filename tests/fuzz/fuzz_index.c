/* libFuzzer target: model.safetensors.index.json of a checkpoint directory that also holds
 * one valid shard ("model-00001-of-00001.safetensors" with tensors "a" and "b"), so inputs
 * that name it reach the lazy shard open and the lookup through the weight map. */
#include "fuzz_common.h"

static const char* dir_with_shard(void)
{
    static char dir[300];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/ck", fuzz_dir());
        mkdir(dir, 0755);
        char shard[400];
        snprintf(shard, sizeof shard, "%s/model-00001-of-00001.safetensors", dir);
        static const float va[2] = { 1.0f, 2.0f }, vb[3] = { 3.0f, 4.0f, 5.0f };
        vkh2o_tensor_write t[2] = {
            { .name = "a", .dtype = VKH2O_DTYPE_F32, .ndim = 1, .shape = { 2 }, .data = va },
            { .name = "b", .dtype = VKH2O_DTYPE_F32, .ndim = 2, .shape = { 1, 3 }, .data = vb },
        };
        vkh2o_error e = { 0 };
        if (vkh2o_safetensors_write(shard, t, 2, NULL, &e) != VKH2O_OK)
            fuzz_fail("cannot write the shard: %s", e.message);
    }
    return dir;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const char* dir = dir_with_shard();
    char name[400];
    snprintf(name, sizeof name, "ck/model.safetensors.index.json");
    const char* ip = fuzz_file(name, data, size);
    vkh2o_checkpoint* ck = NULL;
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_checkpoint_open(dir, &ck, &e);
    if (r != VKH2O_OK) {
        if (ck)
            fuzz_fail("failed open left an object");
        fuzz_check_error(r, &e, ip);
        return 0;
    }
    static const char* names[] = { "a", "b", "c", "", "model.layers.0.self_attn.kv_a_proj_with_mqa.weight" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        vkh2o_tensor_view v;
        vkh2o_error fe = { 0 };
        r = vkh2o_checkpoint_find(ck, names[i], &v, &fe);
        if (r == VKH2O_OK) {
            if (strcmp(v.name, names[i]) || (v.numel != 2 && v.numel != 3))
                fuzz_fail("lookup of '%s' gave '%s'", names[i], v.name);
            fuzz_sink ^= ((const uint8_t*)v.data)[v.nbytes - 1];
        } else {
            fuzz_check_error(r, &fe, dir);
        }
    }
    vkh2o_checkpoint_destroy(ck);
    return 0;
}
