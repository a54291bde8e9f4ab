/* Per-context Vulkan function tables (loader.c). No process-wide function pointers: each context
 * opens the loader itself (or takes the app's vkGetInstanceProcAddr) and keeps its own instance
 * and device tables, so the library defines no vk* symbol and never rebinds the app's.
 *
 * The X-macro lists name every entry point the library calls. A call site uses
 * ctx->vki.vkXxx (global and instance level) or ctx->vk.vkXxx (device level); a new one needs a
 * line in the matching list below. "Optional" entries may be NULL (extensions, a Vulkan 1.0
 * loader); every other entry is checked when the table is loaded. */
#ifndef VKH2O_LOADER_H
#define VKH2O_LOADER_H

/* loaded with vkGetInstanceProcAddr(NULL, ...) */
#define VKH2O_VK_GLOBAL_FUNCS(X) \
    X(vkCreateInstance) \
    X(vkEnumerateInstanceExtensionProperties) \
    X(vkEnumerateInstanceLayerProperties)
#define VKH2O_VK_GLOBAL_OPTIONAL_FUNCS(X) \
    X(vkEnumerateInstanceVersion)

/* loaded with vkGetInstanceProcAddr(instance, ...) */
#define VKH2O_VK_INSTANCE_FUNCS(X) \
    X(vkDestroyInstance) \
    X(vkEnumeratePhysicalDevices) \
    X(vkEnumerateDeviceExtensionProperties) \
    X(vkGetPhysicalDeviceProperties) \
    X(vkGetPhysicalDeviceProperties2) \
    X(vkGetPhysicalDeviceFeatures2) \
    X(vkGetPhysicalDeviceMemoryProperties) \
    X(vkGetPhysicalDeviceQueueFamilyProperties) \
    X(vkCreateDevice) \
    X(vkGetDeviceProcAddr)
#define VKH2O_VK_INSTANCE_OPTIONAL_FUNCS(X) \
    X(vkCreateDebugUtilsMessengerEXT) \
    X(vkDestroyDebugUtilsMessengerEXT)

/* loaded with vkGetDeviceProcAddr(device, ...); member names as volk's VolkDeviceTable */
#define VKH2O_VK_DEVICE_FUNCS(X) \
    X(vkDestroyDevice) \
    X(vkDeviceWaitIdle) \
    X(vkGetDeviceQueue) \
    X(vkQueueSubmit) \
    X(vkQueueWaitIdle) \
    X(vkCreateFence) \
    X(vkDestroyFence) \
    X(vkResetFences) \
    X(vkWaitForFences) \
    X(vkGetFenceStatus) \
    X(vkCreateCommandPool) \
    X(vkDestroyCommandPool) \
    X(vkResetCommandPool) \
    X(vkAllocateCommandBuffers) \
    X(vkFreeCommandBuffers) \
    X(vkBeginCommandBuffer) \
    X(vkEndCommandBuffer) \
    X(vkResetCommandBuffer) \
    X(vkCreateBuffer) \
    X(vkDestroyBuffer) \
    X(vkCreateBufferView) \
    X(vkDestroyBufferView) \
    X(vkGetBufferMemoryRequirements) \
    X(vkAllocateMemory) \
    X(vkFreeMemory) \
    X(vkBindBufferMemory) \
    X(vkMapMemory) \
    X(vkUnmapMemory) \
    X(vkFlushMappedMemoryRanges) \
    X(vkInvalidateMappedMemoryRanges) \
    X(vkCreateShaderModule) \
    X(vkDestroyShaderModule) \
    X(vkCreateComputePipelines) \
    X(vkDestroyPipeline) \
    X(vkCreatePipelineLayout) \
    X(vkDestroyPipelineLayout) \
    X(vkCreateDescriptorSetLayout) \
    X(vkDestroyDescriptorSetLayout) \
    X(vkCreateDescriptorPool) \
    X(vkDestroyDescriptorPool) \
    X(vkResetDescriptorPool) \
    X(vkAllocateDescriptorSets) \
    X(vkFreeDescriptorSets) \
    X(vkUpdateDescriptorSets) \
    X(vkCreateQueryPool) \
    X(vkDestroyQueryPool) \
    X(vkGetQueryPoolResults) \
    X(vkCmdBindPipeline) \
    X(vkCmdBindDescriptorSets) \
    X(vkCmdPushConstants) \
    X(vkCmdDispatch) \
    X(vkCmdDispatchIndirect) \
    X(vkCmdPipelineBarrier) \
    X(vkCmdCopyBuffer) \
    X(vkCmdFillBuffer) \
    X(vkCmdUpdateBuffer) \
    X(vkCmdResetQueryPool) \
    X(vkCmdWriteTimestamp) \
    X(vkCmdCopyQueryPoolResults)
#define VKH2O_VK_DEVICE_OPTIONAL_FUNCS(X) \
    X(vkCmdPushDescriptorSetKHR)

#define VKH2O_VK_MEMBER(name) PFN_##name name;

/* Global and instance level entry points of one loader (instance entries NULL until loaded). */
typedef struct vkh2o_instance_table {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
    VKH2O_VK_GLOBAL_FUNCS(VKH2O_VK_MEMBER)
    VKH2O_VK_GLOBAL_OPTIONAL_FUNCS(VKH2O_VK_MEMBER)
    VKH2O_VK_INSTANCE_FUNCS(VKH2O_VK_MEMBER)
    VKH2O_VK_INSTANCE_OPTIONAL_FUNCS(VKH2O_VK_MEMBER)
} vkh2o_instance_table;

/* Device level entry points of one VkDevice. */
typedef struct vkh2o_device_table {
    VKH2O_VK_DEVICE_FUNCS(VKH2O_VK_MEMBER)
    VKH2O_VK_DEVICE_OPTIONAL_FUNCS(VKH2O_VK_MEMBER)
} vkh2o_device_table;

/* The loader: the app's vkGetInstanceProcAddr when gipa is not NULL (*lib = NULL), otherwise the
 * platform's Vulkan loader opened for the caller (*lib: its handle, for vkh2o_loader_close).
 * Fills t's global entries. On failure returns false and names the missing piece in why. */
bool vkh2o_loader_open(PFN_vkGetInstanceProcAddr gipa, void** lib, vkh2o_instance_table* t, char* why, size_t why_size);
void vkh2o_loader_close(void* lib);
/* Instance entries of t for inst; false (naming the first missing function) if one is absent. */
bool vkh2o_loader_load_instance(vkh2o_instance_table* t, VkInstance inst, char* why, size_t why_size);
/* Device entries for dev; false (naming the first missing function) if one is absent. */
bool vkh2o_loader_load_device(const vkh2o_instance_table* t, VkDevice dev, vkh2o_device_table* d, char* why,
                              size_t why_size);

#endif
