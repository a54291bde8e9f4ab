/* Opening the Vulkan loader and filling a context's function tables (see loader.h). */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#if defined(_WIN32)
#include <windows.h>
#else
#include <dlfcn.h>
#endif

/* The loader's file name per platform: Windows ships vulkan-1.dll; macOS has the loader from
 * the Vulkan SDK (libvulkan.1.dylib) or, without it, MoltenVK itself, which exports
 * vkGetInstanceProcAddr too; elsewhere the soname of the Khronos loader. */
#if defined(_WIN32)
static const char* const loader_names[] = { "vulkan-1.dll" };
#elif defined(__APPLE__)
static const char* const loader_names[] = { "libvulkan.dylib", "libvulkan.1.dylib", "libMoltenVK.dylib" };
#else
static const char* const loader_names[] = { "libvulkan.so.1", "libvulkan.so" };
#endif

static void* lib_open(const char* name)
{
#if defined(_WIN32)
    return (void*)LoadLibraryA(name);
#else
    /* RTLD_LOCAL: the loader's symbols stay out of the global namespace (an app's own
     * -lvulkan is a separate reference to the same library, counted by the dynamic linker).
     * RTLD_NODELETE: closing a context drops the reference but never unmaps the loader (and with
     * it the drivers it loaded) from the process: drivers keep process-lifetime allocations and
     * threads that an unmap would orphan, and leak checkers could no longer name their module. */
#ifdef RTLD_NODELETE
    return dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
#else
    return dlopen(name, RTLD_NOW | RTLD_LOCAL);
#endif
#endif
}

static PFN_vkGetInstanceProcAddr lib_gipa(void* lib)
{
#if defined(_WIN32)
    return (PFN_vkGetInstanceProcAddr)(void (*)(void))GetProcAddress((HMODULE)lib, "vkGetInstanceProcAddr");
#else
    return (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
#endif
}

void vkh2o_loader_close(void* lib)
{
    if (!lib)
        return;
#if defined(_WIN32)
    FreeLibrary((HMODULE)lib);
#else
    dlclose(lib);
#endif
}

bool vkh2o_loader_open(PFN_vkGetInstanceProcAddr gipa, void** lib, vkh2o_instance_table* t, char* why, size_t why_size)
{
    memset(t, 0, sizeof *t);
    *lib = NULL;
    if (!gipa) {
        for (size_t i = 0; i < sizeof loader_names / sizeof loader_names[0] && !*lib; i++)
            *lib = lib_open(loader_names[i]);
        if (!*lib) {
            snprintf(why, why_size, "the Vulkan loader (%s) could not be loaded", loader_names[0]);
            return false;
        }
        gipa = lib_gipa(*lib);
        if (!gipa) {
            snprintf(why, why_size, "the Vulkan loader (%s) has no vkGetInstanceProcAddr", loader_names[0]);
            vkh2o_loader_close(*lib);
            *lib = NULL;
            return false;
        }
    }
    t->vkGetInstanceProcAddr = gipa;
#define LOAD(name) t->name = (PFN_##name)gipa(VK_NULL_HANDLE, #name);
    VKH2O_VK_GLOBAL_FUNCS(LOAD)
    VKH2O_VK_GLOBAL_OPTIONAL_FUNCS(LOAD)
#undef LOAD
#define CHECK(name) \
    if (!t->name) { \
        snprintf(why, why_size, "the Vulkan loader lacks %s", #name); \
        vkh2o_loader_close(*lib); \
        *lib = NULL; \
        return false; \
    }
    VKH2O_VK_GLOBAL_FUNCS(CHECK)
#undef CHECK
    return true;
}

bool vkh2o_loader_load_instance(vkh2o_instance_table* t, VkInstance inst, char* why, size_t why_size)
{
#define LOAD(name) t->name = (PFN_##name)t->vkGetInstanceProcAddr(inst, #name);
    VKH2O_VK_INSTANCE_FUNCS(LOAD)
    VKH2O_VK_INSTANCE_OPTIONAL_FUNCS(LOAD)
#undef LOAD
#define CHECK(name) \
    if (!t->name) { \
        snprintf(why, why_size, "vkGetInstanceProcAddr gave no %s", #name); \
        return false; \
    }
    VKH2O_VK_INSTANCE_FUNCS(CHECK)
#undef CHECK
    return true;
}

bool vkh2o_loader_load_device(const vkh2o_instance_table* t, VkDevice dev, vkh2o_device_table* d, char* why,
                              size_t why_size)
{
    memset(d, 0, sizeof *d);
#define LOAD(name) d->name = (PFN_##name)t->vkGetDeviceProcAddr(dev, #name);
    VKH2O_VK_DEVICE_FUNCS(LOAD)
    VKH2O_VK_DEVICE_OPTIONAL_FUNCS(LOAD)
#undef LOAD
#define CHECK(name) \
    if (!d->name) { \
        snprintf(why, why_size, "vkGetDeviceProcAddr gave no %s", #name); \
        return false; \
    }
    VKH2O_VK_DEVICE_FUNCS(CHECK)
#undef CHECK
    return true;
}
