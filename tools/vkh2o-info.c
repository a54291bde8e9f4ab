/* vkh2o-info: the Vulkan devices vkh2o sees, what it would choose, and what it will use. */
#include "cli.h"
#include "vkh2o.h"

#include <stdio.h>
#include <string.h>

static const char* type_name(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
    }
}

static void print_caps(const vkh2o_device_caps* c)
{
    printf("    type                    %s\n", type_name(c->device_type));
    printf("    driver                  %s %s\n", c->driver_name, c->driver_info);
    printf("    Vulkan                  %u.%u.%u\n", VK_API_VERSION_MAJOR(c->api_version), VK_API_VERSION_MINOR(c->api_version),
           VK_API_VERSION_PATCH(c->api_version));
    printf("    subgroup size           %u (arithmetic %s, ballot %s)\n", c->subgroup_size, c->subgroup_arithmetic ? "yes" : "no",
           c->subgroup_ballot ? "yes" : "no");
    printf("    shaderFloat16           %s\n", c->shader_float16 ? "yes" : "no");
    printf("    16-bit / 8-bit storage  %s / %s\n", c->storage_16bit ? "yes" : "no", c->storage_8bit ? "yes" : "no");
    printf("    push descriptors        %s\n", c->push_descriptor ? "yes" : "no");
    printf("    maxStorageBufferRange   %llu MiB\n", (unsigned long long)(c->max_storage_buffer_range >> 20));
    printf("    shared memory           %u KiB\n", c->max_shared_memory >> 10);
    printf("    max workgroup size      %u\n", c->max_workgroup_invocations);
    printf("    device-local memory     %llu MiB%s\n", (unsigned long long)(c->device_local_bytes >> 20),
           c->unified_memory ? " (unified with the host)" : "");
    printf("    timestamps              %s (%.3g ns/tick)\n", c->timestamps ? "yes" : "no", c->timestamp_period_ns);
}

int main(int argc, char** argv)
{
    uint32_t device = 0;
    bool validation = false, shaders = false;
    cli_opt opts[] = {
        { "--device", CLI_U32, &device, "N", .hi = 63, .help = "create the context on device N instead" },
        { "--validation", CLI_BOOL, &validation, .help = "enable the Khronos validation layer" },
        { "--shaders", CLI_BOOL, &shaders, .help = "also list the embedded compute shaders" },
    };
    const cli_spec spec = {
        "vkh2o-info",
        "usage: vkh2o-info [--device N] [--validation] [--shaders] [--help]\n"
        "Lists the Vulkan 1.2 devices vkh2o sees and the one it chooses by default\n"
        "(discrete > integrated > virtual > CPU; environment VKH2O_DEVICE=N overrides),\n"
        "then creates a context on it and prints what it enabled.\n",
        NULL, opts, CLI_N(opts), NULL,
    };
    const int prc = cli_parse(&spec, argc, argv);
    if (prc)
        return prc < 0 ? 0 : prc;
    const uint32_t select = spec.opts[0].given ? VKH2O_DEVICE_INDEX(device) : 0;
    const uint32_t flags = validation ? VKH2O_CONTEXT_VALIDATION : 0;
    if (!cli_check_device("vkh2o-info", argc, argv, select ? select - 1 : 0))
        return 2;
    vkh2o_device_caps list[16];
    uint32_t n = 0;
    if (vkh2o_enumerate_devices(list, 16, &n) != VKH2O_OK || n == 0)
        return cli_fail(1, "vkh2o-info: no Vulkan device found (is a driver installed? Debian: mesa-vulkan-drivers)\n");
    printf("vkh2o %d.%d.%d: %u Vulkan device%s\n", VKH2O_VERSION_MAJOR, VKH2O_VERSION_MINOR, VKH2O_VERSION_PATCH, n, n == 1 ? "" : "s");
    for (uint32_t i = 0; i < n && i < 16; i++) {
        printf("  [%u] %s\n", i, list[i].device_name);
        print_caps(&list[i]);
    }
    vkh2o_context* ctx;
    if (cli_context_create("vkh2o-info", &(vkh2o_context_desc){ .device_select = select, .flags = flags }, &ctx) != VKH2O_OK)
        return 1;
    const vkh2o_device_caps* c = vkh2o_context_get_caps(ctx);
    printf("chosen: %s\n", c->device_name);
    printf("  enabled: shaderFloat16 %s, 16-bit storage %s, 8-bit storage %s, push descriptors %s, timestamps %s\n",
           c->shader_float16 ? "yes" : "no", c->storage_16bit ? "yes" : "no", c->storage_8bit ? "yes" : "no",
           c->push_descriptor ? "yes" : "no", c->timestamps ? "yes" : "no");
    /* the device profile: what the library chose for this device at create */
    const vkh2o_device_profile* p = vkh2o_context_get_profile(ctx);
    static const char* const paths[] = { "each matmul's choice", "register (forced)", "tiled (forced)", "texel (forced)" };
    printf("  profile: %s kernel shapes%s\n",
           p->cpu_shapes ? "CPU (register-blocked, texel reads)" : "GPU (wide workgroups, shared-memory tiles)",
           !p->cpu_shapes && c->device_type == VK_PHYSICAL_DEVICE_TYPE_CPU ? " on a CPU device (VKH2O_GPU_SHAPES)" : "");
    if (p->loop_budget)
        printf("    loop budget             %u iterations per invocation\n", p->loop_budget);
    else
        printf("    loop budget             none\n");
    printf("    element-wise            workgroup %u, at most %u workgroups a row, axpby %u per invocation\n",
           p->elementwise_workgroup, p->elementwise_groups_max, p->axpby_per_invocation);
    printf("    rmsnorm / logprob       workgroups %u / %u\n", p->rmsnorm_workgroup, p->logprob_workgroup);
    printf("    matmul                  %s; tiled workgroup %u\n", paths[p->matmul_path < 4 ? p->matmul_path : 0],
           p->matmul_tiled_workgroup);
    printf("    attention               workgroup %u, %u queries x %u keys a tile, %u heads per P.V, %s reads\n",
           p->attn_local, p->attn_rq, p->attn_rk, p->attn_hg, p->attn_texel ? "texel" : "storage");
    if (p->max_binding_bytes)
        printf("    weight chunk            at most %llu bytes (VKH2O_MAX_BINDING_BYTES)\n",
               (unsigned long long)p->max_binding_bytes);
    printf("    fits                    workgroups <= %u of %u invocations, shared memory <= %u of %u bytes\n",
           p->max_invocations, c->max_workgroup_invocations, p->max_shared_bytes, c->max_shared_memory);
    if (shaders) {
        printf("embedded shaders (%u):", vkh2o_kernel_count());
        for (uint32_t i = 0; i < vkh2o_kernel_count(); i++)
            printf(" %s", vkh2o_kernel_name(i));
        printf("\n");
    }
    uint32_t msgs = vkh2o_context_get_validation_messages(ctx);
    vkh2o_context_destroy(ctx);
    return msgs ? 1 : 0;
}
