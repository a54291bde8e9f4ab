"""The binding: cffi in ABI mode, its cdef generated from the public headers at import.

The library's public headers (include/vkh2o.h and include/vkh2o/*.h) are run through the C
preprocessor with a stub <vulkan/vulkan_core.h> that declares only the few Vulkan types the API
names (handles as pointers, VkPhysicalDeviceType as an enum, the rest opaque), and cffi parses the
result. So every struct, enum and function is exactly the header's: a field added to a desc is
there (zero-initialised by ffi.new) without a change here, and the Python layer sets fields by
name. tests/test_header_drift.py checks what cffi computes (each struct's size and each field's
offset) against the C compiler's with the real Vulkan headers, and that every name the Python
layer uses is declared.

Where things are found:
  the library  $VKH2O_LIBRARY, else the path `scripts/vkh2o.sh python` recorded in _libpath.txt
               beside this file, else libvkh2o.so in the source tree's build folders, else the
               system's (ctypes.util.find_library)
  the headers  $VKH2O_INCLUDE_DIR, else the source tree's include/ (this package lives in
               python/ of it), else ../include beside the library (an installed prefix)
  the compiler $CC, else cc, gcc, clang or cpp
"""
import ctypes.util
import os
import re
import shutil
import subprocess
import tempfile
import warnings

import cffi

_HERE = os.path.dirname(os.path.abspath(__file__))
_SRC = os.path.dirname(os.path.dirname(_HERE))   # the source tree (python/vkh2o -> .)

# What the public headers need of <vulkan/vulkan_core.h>: the handles (pointers on every 64-bit
# platform; the drift test compares the sizes with the real header's), the device type enum, and
# opaque structs only ever passed by pointer.
_VULKAN_STUB = """
typedef struct VkInstance_T* VkInstance;
typedef struct VkPhysicalDevice_T* VkPhysicalDevice;
typedef struct VkDevice_T* VkDevice;
typedef struct VkQueue_T* VkQueue;
typedef struct VkCommandBuffer_T* VkCommandBuffer;
typedef struct VkBuffer_T* VkBuffer;
typedef enum VkPhysicalDeviceType {
    VK_PHYSICAL_DEVICE_TYPE_OTHER = 0,
    VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU = 1,
    VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU = 2,
    VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU = 3,
    VK_PHYSICAL_DEVICE_TYPE_CPU = 4,
    VK_PHYSICAL_DEVICE_TYPE_MAX_ENUM = 0x7FFFFFFF
} VkPhysicalDeviceType;
typedef struct VkAllocationCallbacks VkAllocationCallbacks;
typedef struct VkPhysicalDeviceFeatures2 VkPhysicalDeviceFeatures2;
typedef void (*PFN_vkVoidFunction)(void);
typedef PFN_vkVoidFunction (*PFN_vkGetInstanceProcAddr)(VkInstance instance, const char* pName);
"""


class LibraryNotFound(ImportError):
    pass


def include_dir(library=None):
    """The folder holding vkh2o.h."""
    cands = []
    if os.environ.get("VKH2O_INCLUDE_DIR"):
        cands.append(os.environ["VKH2O_INCLUDE_DIR"])
    cands.append(os.path.join(_SRC, "include"))
    if library:
        cands.append(os.path.join(os.path.dirname(os.path.realpath(library)), os.pardir, "include"))
    for c in cands:
        if os.path.isfile(os.path.join(c, "vkh2o.h")):
            return os.path.abspath(c)
    raise LibraryNotFound("vkh2o: the public headers (vkh2o.h) were not found in %s; set VKH2O_INCLUDE_DIR"
                          % ", ".join(cands))


def _compiler():
    for c in ([os.environ["CC"]] if os.environ.get("CC") else []) + ["cc", "gcc", "clang", "cpp"]:
        exe = shutil.which(c.split()[0])
        if exe:
            return [exe] + c.split()[1:]
    raise LibraryNotFound("vkh2o: no C preprocessor (cc, gcc, clang or cpp; or $CC) to read the headers with")


def _preprocess(inc, extra):
    """Runs the preprocessor over vkh2o.h with the stub headers; returns its output."""
    with tempfile.TemporaryDirectory(prefix="vkh2o-cdef-") as stub:
        os.makedirs(os.path.join(stub, "vulkan"))
        for name, text in (("stdbool.h", ""), ("stddef.h", ""), ("stdint.h", ""),
                           (os.path.join("vulkan", "vulkan_core.h"), _VULKAN_STUB)):
            with open(os.path.join(stub, name), "w") as f:
                f.write(text)
        cmd = _compiler() + ["-E", "-P", "-nostdinc", "-I", stub, "-I", inc] + extra + ["-x", "c",
                                                                                     os.path.join(inc, "vkh2o.h")]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            raise LibraryNotFound("vkh2o: preprocessing the headers failed (%s):\n%s" % (" ".join(cmd), p.stderr))
        return p.stdout


def generate_cdef(inc):
    """The cdef (declarations of the public headers) and the integer macros named VKH2O_*."""
    src = _preprocess(inc, [])
    macros = {}
    for line in _preprocess(inc, ["-dM"]).splitlines():
        m = re.match(r"#define (VKH2O_[A-Z0-9_]+) \(?((?:0x[0-9a-fA-F]+|[0-9]+))[uUlL]*\)?$", line)
        if m:
            macros[m.group(1)] = int(m.group(2), 0)
    return src, macros


def find_library():
    env = os.environ.get("VKH2O_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise LibraryNotFound("vkh2o: VKH2O_LIBRARY=%s does not exist; build the shared library with "
                                  "`bash scripts/vkh2o.sh python` (or unset it)" % env)
        return env
    rec = os.path.join(_HERE, "_libpath.txt")
    if os.path.isfile(rec):
        with open(rec) as f:
            p = f.read().strip()
        if os.path.isfile(p):
            return p
    for d in ("build-py", "build", "build/embed"):
        p = os.path.join(_SRC, d, "libvkh2o.so")
        if os.path.isfile(p):
            return p
    p = ctypes.util.find_library("vkh2o")
    if p:
        return p
    raise LibraryNotFound(
        "vkh2o: the shared library libvkh2o.so was not found. Build and install it with "
        "`bash scripts/vkh2o.sh python` from the vkh2o source tree (or point VKH2O_LIBRARY at a libvkh2o.so)")


def _warn_if_stale(path, inc):
    """The structs come from the headers: a library built before a header changed would read and
    write them with its old layout. Warn when a header is newer than the library."""
    try:
        lib_t = os.path.getmtime(os.path.realpath(path))
        hdrs = [os.path.join(inc, "vkh2o.h")] + [os.path.join(inc, "vkh2o", f) for f in os.listdir(os.path.join(inc, "vkh2o"))]
        newer = [h for h in hdrs if os.path.getmtime(h) > lib_t]
    except OSError:
        return
    if newer:
        warnings.warn("vkh2o: %s is older than %s: rebuild it (`bash scripts/vkh2o.sh python`), or structs may "
                      "disagree with the headers" % (path, ", ".join(os.path.basename(h) for h in newer)),
                      RuntimeWarning, stacklevel=3)


def load():
    """(ffi, lib, macros, library path)."""
    path = find_library()
    inc = include_dir(path)
    _warn_if_stale(path, inc)
    src, macros = generate_cdef(inc)
    ffi = cffi.FFI()
    ffi.cdef(src)
    try:
        lib = ffi.dlopen(path)
    except OSError as e:
        raise LibraryNotFound("vkh2o: %s could not be loaded (%s); rebuild it with `bash scripts/vkh2o.sh python`"
                              % (path, e)) from e
    return ffi, lib, macros, path
