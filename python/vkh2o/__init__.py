"""vkh2o from Python: MLA attention and the H2O / quantised KV cache on Vulkan, NumPy in and out.

    import vkh2o
    with vkh2o.Context(validation=True) as ctx:
        cache = vkh2o.KVCache(ctx, num_heads=4, kv_lora_rank=64, qk_rope_head_dim=16, max_tokens=256,
                              capacity_tokens=64, n_sink=4, n_recent=16, policy="h2o", precision="tiered",
                              tier_tokens={"fp16": 8, "int8": 16})
        cache.prefill(ckv=..., kpe=..., mass=...)
        out = cache.step(q, ckv=..., kpe=...)
        snap = cache.snapshot()            # positions, tiers, scores (NumPy)
        model = vkh2o.Model(ctx, "models/tiny-mla")
        with model.session(capacity_bytes=..., precision="tiered") as s:
            logits = s.prefill(b"The pass key is")

Keyword arguments are the C desc fields by name (vkh2o/kvcache.h, vkh2o/lm.h); enum fields take the
enum's names in lower case without their prefix ("h2o", "tova", "tiered", "int4", "expanded").
Errors are vkh2o.Error subclasses, one per vkh2o_result, carrying vkh2o_last_error's message.
docs/PYTHON.md has the whole guide.
"""
import logging
import operator
import threading
import weakref

import numpy as np

from . import _ffi

try:
    ffi, lib, _MACROS, LIBRARY_PATH = _ffi.load()
except _ffi.LibraryNotFound as _e:   # one clear message, no traceback into cffi
    raise ImportError(str(_e)) from None

POSITION_FROM_CACHE = _MACROS["VKH2O_POSITION_FROM_CACHE"]
VERSION = (_MACROS["VKH2O_VERSION_MAJOR"], _MACROS["VKH2O_VERSION_MINOR"], _MACROS["VKH2O_VERSION_PATCH"])
TIERS = ("fp16", "int8", "int4", "int2")

_log = logging.getLogger("vkh2o")

__all__ = ["Context", "KVCache", "MLALayer", "Model", "Session", "SafeTensors", "Snapshot", "SyntheticCheckpoint",
           "Error", "ClosedError", "resolve_kvcache", "devices", "mla_config", "write_synthetic_checkpoint", "TIERS",
           "POSITION_FROM_CACHE"]

# ---------------------------------------------------------------------------------------------
# errors


class Error(Exception):
    """A vkh2o call failed: .code (the vkh2o_result), .result (its name), .message (the library's)."""

    code = None

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    @property
    def result(self):
        return ffi.string(lib.vkh2o_result_string(self.code)).decode() if self.code is not None else None


class ClosedError(Error, ValueError):
    """An object (or the context it came from) was used after close()."""


_ERRORS = {}


def _error_class(code, cname, *bases):
    cls = type(cname, (Error,) + bases, {"code": code, "__doc__": "vkh2o_result %d" % code})
    _ERRORS[code] = cls
    globals()[cname] = cls
    __all__.append(cname)
    return cls


InvalidArgumentError = _error_class(lib.VKH2O_ERROR_INVALID_ARGUMENT, "InvalidArgumentError", ValueError)
IoError = _error_class(lib.VKH2O_ERROR_IO, "IoError")
FormatError = _error_class(lib.VKH2O_ERROR_FORMAT, "FormatError")
MissingTensorError = _error_class(lib.VKH2O_ERROR_MISSING_TENSOR, "MissingTensorError", KeyError)
ShapeError = _error_class(lib.VKH2O_ERROR_SHAPE, "ShapeError")
DtypeError = _error_class(lib.VKH2O_ERROR_DTYPE, "DtypeError")
NoDeviceError = _error_class(lib.VKH2O_ERROR_NO_DEVICE, "NoDeviceError")
VulkanError = _error_class(lib.VKH2O_ERROR_VULKAN, "VulkanError")
OutOfDeviceMemoryError = _error_class(lib.VKH2O_ERROR_OUT_OF_DEVICE_MEMORY, "OutOfDeviceMemoryError", MemoryError)
OutOfHostMemoryError = _error_class(lib.VKH2O_ERROR_OUT_OF_HOST_MEMORY, "OutOfHostMemoryError", MemoryError)
UnsupportedError = _error_class(lib.VKH2O_ERROR_UNSUPPORTED, "UnsupportedError")
BudgetError = _error_class(lib.VKH2O_ERROR_BUDGET, "BudgetError", ValueError)
DeviceTimeoutError = _error_class(lib.VKH2O_ERROR_TIMEOUT, "DeviceTimeoutError", TimeoutError)
DeviceLostError = _error_class(lib.VKH2O_ERROR_DEVICE_LOST, "DeviceLostError")


def _raise(code, message):
    cls = _ERRORS.get(code, Error)
    name = ffi.string(lib.vkh2o_result_string(code)).decode()
    raise cls("%s: %s" % (name, message) if message else name, code)


def _check_err(r, err):
    """For calls that report through a vkh2o_error."""
    if r != lib.VKH2O_OK:
        _raise(r, ffi.string(err.message).decode(errors="replace"))


# ---------------------------------------------------------------------------------------------
# structs and enums by name


def _words(name):
    return name.split("_")


def _enum_prefix(ctype):
    names = [n.split("_") for n in ctype.relements]
    if len(names) < 2:
        return ""
    pre = []
    for parts in zip(*names):
        if len(set(parts)) != 1:
            break
        pre.append(parts[0])
    # keep at least one word of every name
    while pre and any(len(n) <= len(pre) for n in names):
        pre.pop()
    return "_".join(pre) + "_" if pre else ""


_PREFIXES = {}


def _enum_names(ctype):
    """{short lower-case name: value} of an enum ctype ("h2o": 0)."""
    d = _PREFIXES.get(ctype.cname)
    if d is None:
        pre = _enum_prefix(ctype)
        d = {n[len(pre):].lower(): v for n, v in ctype.relements.items()}
        _PREFIXES[ctype.cname] = d
    return d


def _enum_name(ctype, value):
    for n, v in _enum_names(ctype).items():
        if v == value:
            return n
    return int(value)


def _enum_value(ctype, value, field):
    if isinstance(value, str):
        names = _enum_names(ctype)
        key = value.lower().replace("-", "_")
        if key in names:
            return names[key]
        raise ValueError("%s: %r is not one of %s" % (field, value, ", ".join(sorted(names))))
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("%s: expected a name (%s) or an int, got %r" % (field, ", ".join(sorted(_enum_names(ctype))),
                                                                        value)) from None


def _to_py(ftype, v):
    k = ftype.kind
    if k == "primitive":
        return v
    if k == "enum":
        return _enum_name(ftype, v)
    if k == "array":
        if ftype.item.cname == "char":
            return ffi.string(v).decode(errors="replace")
        return [_to_py(ftype.item, x) for x in v]
    if k == "struct":
        return struct_dict(v)
    return None   # pointers, functions: not data


def struct_dict(cd):
    """A C struct (cdata) as a dict by field name (enums as names, arrays as lists)."""
    t = ffi.typeof(cd)
    if t.kind == "pointer":
        cd, t = cd[0], t.item
    return {name: _to_py(f.type, getattr(cd, name)) for name, f in t.fields if f.type.kind not in ("pointer", "function")}


def _fields(cd):
    t = ffi.typeof(cd)
    return dict((t.item if t.kind == "pointer" else t).fields)


def _set_fields(cd, kw, what):
    """Sets the struct's fields from keyword arguments, by name."""
    fields = _fields(cd)
    for k, v in kw.items():
        if k not in fields:
            raise TypeError("%s: unknown field %r (the fields are %s)" % (what, k, ", ".join(fields)))
        ft = fields[k].type
        try:
            if ft.kind == "enum":
                setattr(cd, k, _enum_value(ft, v, k))
            elif ft.kind == "array":
                arr = getattr(cd, k)
                if isinstance(v, dict):
                    seq = [0] * ft.length
                    for tn, x in v.items():
                        if tn not in TIERS:
                            raise ValueError("%s: %r is not a tier (%s)" % (k, tn, ", ".join(TIERS)))
                        seq[TIERS.index(tn)] = x
                    v = seq
                v = list(v)
                if len(v) > ft.length:
                    raise ValueError("%s: at most %d entries, got %d" % (k, ft.length, len(v)))
                for i in range(ft.length):
                    arr[i] = operator.index(v[i]) if i < len(v) else 0
            elif ft.kind == "struct":
                if not isinstance(v, dict):
                    raise TypeError("%s: expected a dict of its fields, got %r" % (k, type(v).__name__))
                _set_fields(getattr(cd, k), v, "%s.%s" % (what, k))
            elif ft.kind == "primitive":
                if k == "tier_mask" and not isinstance(v, int):
                    v = sum(1 << TIERS.index(t) for t in v)
                if ft.cname in ("float", "double"):
                    v = float(v)
                elif ft.cname == "_Bool":
                    v = bool(v)
                else:
                    v = operator.index(v)
                setattr(cd, k, v)
            else:
                raise TypeError("%s: a %s field cannot be set from Python" % (k, ft.cname))
        except OverflowError:
            raise ValueError("%s: %r is out of range for %s" % (k, v, ft.cname)) from None
        except TypeError as e:
            if str(e).startswith(k):
                raise
            raise TypeError("%s: %r is not a valid %s (%s)" % (k, v, ft.cname, e)) from None


# ---------------------------------------------------------------------------------------------
# arrays


def _shape_str(shape):
    return "(" + ", ".join("n" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _floats(name, a, shape):
    """a as a C-contiguous float32 array of `shape` (None: any size); converted copies of float16 /
    float64, never a reinterpretation. ValueError naming the argument otherwise."""
    arr = np.asarray(a)
    if arr.dtype.kind != "f":
        raise ValueError("%s: expected a float array (float32, float16 or float64), got dtype %s" % (name, arr.dtype))
    if arr.ndim != len(shape) or any(s is not None and s != g for s, g in zip(shape, arr.shape)):
        raise ValueError("%s: expected shape %s, got %s" % (name, _shape_str(shape), tuple(arr.shape)))
    if not arr.flags.c_contiguous:
        raise ValueError("%s: expected a C-contiguous array, got strides %s (np.ascontiguousarray makes one)"
                         % (name, arr.strides))
    return np.ascontiguousarray(arr, dtype=np.float32)


def _tokens(name, a, vocab=None):
    if isinstance(a, (bytes, bytearray, memoryview)):
        arr = np.frombuffer(bytes(a), dtype=np.uint8)
    elif isinstance(a, str):
        raise ValueError("%s: expected token ids (ints or bytes), got a str (encode it, e.g. text.encode())" % name)
    else:
        arr = np.asarray(a)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.size == 0:   # before the dtype: np.asarray([]) is float64
        raise ValueError("%s: no tokens" % name)
    if arr.dtype.kind not in "iu":
        raise ValueError("%s: expected integer token ids, got dtype %s" % (name, arr.dtype))
    if arr.ndim != 1:
        raise ValueError("%s: expected shape (n,), got %s" % (name, tuple(arr.shape)))
    if vocab is not None and (arr.min() < 0 or arr.max() >= vocab):
        bad = arr[(arr < 0) | (arr >= vocab)][0]
        raise ValueError("%s: token %d is outside the vocabulary [0, %d)" % (name, bad, vocab))
    return np.ascontiguousarray(arr, dtype=np.uint32)


def _fptr(a):
    return ffi.from_buffer("float[]", a, require_writable=False) if a is not None else ffi.NULL


def _out(a):
    return ffi.from_buffer("float[]", a, require_writable=True)


# ---------------------------------------------------------------------------------------------
# lifetimes: one tree of handles per context. A child (cache, layer, model, session, buffer) is
# released before its parent; Python objects keep their parents alive, and close() of a parent
# releases its children first (using them afterwards raises ClosedError).


class _Handle:
    __slots__ = ("ptr", "destroy", "children", "parent", "what", "__weakref__")

    def __init__(self, ptr, destroy, parent, what):
        self.ptr, self.destroy, self.parent, self.what = ptr, destroy, parent, what
        self.children = {}
        if parent is not None:
            parent.children[id(self)] = self

    def release(self):
        if self.ptr is None:
            return
        for c in reversed(list(self.children.values())):
            c.release()
        ptr, self.ptr = self.ptr, None
        try:
            self.destroy(ptr)
        finally:
            if self.parent is not None:
                self.parent.children.pop(id(self), None)

    def get(self):
        if self.ptr is None:
            raise ClosedError("this vkh2o.%s is closed%s" % (self.what, "" if self.parent is None else
                                                             " (or the object it came from was closed)"))
        return self.ptr


class _Owned:
    """An object holding one handle: close(), a context manager, released when collected."""

    _h = None

    def _own(self, handle):
        self._h = handle
        self._fin = weakref.finalize(self, handle.release)

    def close(self):
        """Releases the object now (and everything made from it); later use raises ClosedError."""
        if self._h is not None:
            self._fin()

    @property
    def closed(self):
        return self._h is None or self._h.ptr is None

    def __enter__(self):
        self._h.get()
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------------------------------------
# context

_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}
_LEVEL_NAMES = {0: "debug", 1: "info", 2: "warning", 3: "error"}


def devices():
    """The Vulkan 1.2 devices the loader sees (vkh2o_enumerate_devices), as dicts of their caps."""
    n = ffi.new("uint32_t*")
    r = lib.vkh2o_enumerate_devices(ffi.NULL, 0, n)
    if r != lib.VKH2O_OK:
        _raise(r, "enumerating the Vulkan devices")
    caps = ffi.new("vkh2o_device_caps[]", max(n[0], 1))
    r = lib.vkh2o_enumerate_devices(caps, n[0], n)
    if r != lib.VKH2O_OK:
        _raise(r, "enumerating the Vulkan devices")
    return [struct_dict(caps[i]) for i in range(n[0])]


class Context(_Owned):
    """A Vulkan device (vkh2o_context). device: None (the best one; VKH2O_DEVICE=N overrides) or
    the index of a physical device (devices()). validation: the Khronos validation layer on
    (also VKH2O_VALIDATION=1); its messages are counted (validation_messages). baseline_only: no
    optional device feature (VKH2O_CONTEXT_BASELINE_ONLY). log: a callable (level, message) for
    the library's messages; by default they go to logging.getLogger("vkh2o") (warnings and
    errors reach stderr). The last 256 messages are in .messages either way."""

    def __init__(self, device=None, validation=False, baseline_only=False, log=None):
        self.messages = []
        self._user_log = log
        msgs = self.messages

        def _cb(level, message, user):
            try:
                text = ffi.string(message).decode(errors="replace")
                msgs.append((_LEVEL_NAMES.get(level, str(level)), text))
                del msgs[:-256]
                if log is not None:
                    log(_LEVEL_NAMES.get(level, str(level)), text)
                else:
                    _log.log(_LEVELS.get(level, logging.ERROR), "%s", text)
            except Exception:   # never let an exception unwind into C
                pass

        self._cb = ffi.callback("vkh2o_log_fn", _cb)
        desc = ffi.new("vkh2o_context_desc*")
        desc.log = self._cb
        if device is not None:
            desc.device_select = operator.index(device) + 1
        desc.flags = ((lib.VKH2O_CONTEXT_VALIDATION if validation else 0) |
                      (lib.VKH2O_CONTEXT_BASELINE_ONLY if baseline_only else 0))
        out = ffi.new("vkh2o_context**")
        r = lib.vkh2o_context_create(desc, out)
        if r != lib.VKH2O_OK:
            _raise(r, "; ".join(m for lv, m in msgs if lv in ("warning", "error")) or "creating the context")
        self._lock = threading.RLock()
        cb = self._cb
        self._own(_Handle(out[0], lambda p, cb=cb: lib.vkh2o_context_destroy(p), None, "Context"))

    # calls on the context's unit (one thread at a time: the lock)
    def _call(self, fn, *args):
        with self._lock:
            r = fn(*args)
        if r != lib.VKH2O_OK:
            _raise(r, self.last_error)
        return r

    @property
    def _ptr(self):
        return self._h.get()

    @property
    def last_error(self):
        """vkh2o_last_error: the last failure's message on this context."""
        if self.closed:
            return ""
        return ffi.string(lib.vkh2o_last_error(self._h.ptr)).decode(errors="replace")

    @property
    def caps(self):
        """vkh2o_device_caps as a dict (device_name, driver_name, device_type, limits, features)."""
        return struct_dict(lib.vkh2o_context_get_caps(self._ptr))

    @property
    def device_name(self):
        return ffi.string(lib.vkh2o_context_get_caps(self._ptr).device_name).decode()

    @property
    def limits(self):
        c = self.caps
        return {k: c[k] for k in ("max_storage_buffer_range", "max_shared_memory", "max_workgroup_invocations",
                                  "max_workgroup_count", "max_texel_buffer_elements", "device_local_bytes",
                                  "subgroup_size", "timestamp_period_ns")}

    @property
    def memory_stats(self):
        """Device memory held now: device_bytes, device_allocations, peak_device_bytes."""
        with self._lock:
            return struct_dict(lib.vkh2o_context_get_memory_stats(self._ptr))

    @property
    def validation_messages(self):
        """Validation-layer warnings and errors seen so far (0 without the layer)."""
        return lib.vkh2o_context_get_validation_messages(self._ptr)

    @property
    def validation(self):
        return bool(self.flags_value & lib.VKH2O_CONTEXT_VALIDATION)

    @property
    def flags_value(self):
        return lib.vkh2o_context_get_flags(self._ptr)

    @property
    def device_ms(self):
        """Device milliseconds of every submission the context made itself (negative: no timestamps)."""
        return lib.vkh2o_context_get_device_ms(self._ptr)

    def kernel_dispatches(self):
        """{kernel name: dispatches this context recorded}, for the kernels dispatched at least once."""
        p = self._ptr
        out = {}
        for i in range(lib.vkh2o_kernel_count()):
            n = lib.vkh2o_context_get_kernel_dispatches(p, i)
            if n:
                out[ffi.string(lib.vkh2o_kernel_name(i)).decode()] = n
        return out

    def wait_idle(self):
        self._call(lib.vkh2o_context_wait_idle, self._ptr)

    def __repr__(self):
        return "<vkh2o.Context %s>" % ("closed" if self.closed else repr(self.device_name))


class _DeviceBuffers:
    """Named device buffers a cache or layer reuses between calls, grown on demand."""

    def __init__(self, ctx, parent):
        self.ctx, self.parent, self.bufs = ctx, parent, {}

    def get(self, name, nbytes):
        self.parent.get()   # a closed owner: ClosedError before a buffer is made that nothing would release
        nbytes = max(int(nbytes), 4)
        h = self.bufs.get(name)
        if h is not None and h.ptr is not None and lib.vkh2o_buffer_get_size(h.ptr) >= nbytes:
            return h.ptr
        if h is not None:
            h.release()
        out = ffi.new("vkh2o_buffer**")
        self.ctx._call(lib.vkh2o_buffer_create, self.ctx._ptr, nbytes, out)
        h = _Handle(out[0], lib.vkh2o_buffer_destroy, self.parent, "buffer")
        self.bufs[name] = h
        return h.ptr

    def upload(self, name, arr):
        b = self.get(name, arr.nbytes)
        self.ctx._call(lib.vkh2o_buffer_upload, b, 0, ffi.from_buffer(arr), arr.nbytes)
        return b

    def download(self, buf, arr):
        self.ctx._call(lib.vkh2o_buffer_download, buf, 0, ffi.from_buffer(arr, require_writable=True), arr.nbytes)
        return arr


# ---------------------------------------------------------------------------------------------
# KV cache


def _mla_source(obj):
    """A vkh2o_mla_config* from an MLALayer, a Model, or a dict of config fields."""
    if isinstance(obj, MLALayer):
        return lib.vkh2o_mla_layer_get_config(obj._h.get())
    if isinstance(obj, Model):
        return ffi.addressof(lib.vkh2o_model_get_config(obj._h.get())[0], "attn")
    if isinstance(obj, dict):
        return mla_config(obj)
    raise TypeError("mla: expected an MLALayer, a Model or a dict of vkh2o_mla_config fields, got %r"
                    % type(obj).__name__)


def mla_config(fields=None, preset=None, json=None):
    """A vkh2o_mla_config (cdata): a preset ("kimi-k2.6" = the default, "deepseek-v3", ...), read
    from an HF config.json, and/or fields given by name on top."""
    cfg = ffi.new("vkh2o_mla_config*")
    err = ffi.new("vkh2o_error*")
    if preset is not None:
        _check_err(lib.vkh2o_mla_config_preset(preset.encode(), cfg, err), err)
    else:
        lib.vkh2o_mla_config_kimi_k26(cfg)
    if json is not None:
        _check_err(lib.vkh2o_mla_config_from_json(str(json).encode(), cfg, err), err)
    if fields:
        _set_fields(cfg, fields, "vkh2o_mla_config")
    return cfg


def _kv_desc(kw, mla=None):
    d = ffi.new("vkh2o_kvcache_desc*")
    if mla is not None:
        lib.vkh2o_kvcache_desc_from_mla(_mla_source(mla), d)
    _set_fields(d, kw, "vkh2o_kvcache_desc")
    return d


def resolve_kvcache(mla=None, **desc):
    """vkh2o_kvcache_desc_resolve without a device: (the desc with its defaults, the plan) as dicts.
    Raises InvalidArgumentError / BudgetError with the library's message."""
    d = _kv_desc(desc, mla)
    out = ffi.new("vkh2o_kvcache_desc*")
    plan = ffi.new("vkh2o_kvcache_plan*")
    err = ffi.new("vkh2o_error*")
    _check_err(lib.vkh2o_kvcache_desc_resolve(d, out, plan, err), err)
    return struct_dict(out), struct_dict(plan)


class Snapshot:
    """One cache layer's held tokens, ordered by position: positions (uint32), tiers (uint8:
    0 fp16 .. 3 int2), scores (float32), rows (float32 [len, row numbers], dequantised as attention
    reads them; None unless asked for)."""

    def __init__(self, positions, tiers, scores, rows):
        self.positions, self.tiers, self.scores, self.rows = positions, tiers, scores, rows

    def __len__(self):
        return len(self.positions)

    @property
    def tier_names(self):
        return [TIERS[t] for t in self.tiers]

    def by_tier(self):
        """{tier name: positions held at that tier} for the tiers holding any."""
        return {TIERS[t]: self.positions[self.tiers == t] for t in range(len(TIERS)) if np.any(self.tiers == t)}

    def __repr__(self):
        return "<vkh2o.Snapshot %d tokens: %s>" % (len(self), ", ".join("%s %d" % (k, len(v))
                                                                          for k, v in self.by_tier().items()))


class KVCache(_Owned):
    """The one KV cache (vkh2o_kvcache): which tokens stay (policy, score_mode, capacity_tokens or
    capacity_bytes, n_sink, n_recent, n_protect, ...) and at what precision (precision, tier_tokens,
    tier_mask, group_size, ...). Keyword arguments are vkh2o_kvcache_desc's fields by name;
    mla= an MLALayer, Model or dict of MLA config fields fills the shape and the softmax scale
    (vkh2o_kvcache_desc_from_mla)."""

    def __init__(self, ctx, mla=None, **desc):
        if not isinstance(ctx, Context):
            raise TypeError("ctx: expected a vkh2o.Context, got %r" % type(ctx).__name__)
        d = _kv_desc(desc, mla)
        out = ffi.new("vkh2o_kvcache**")
        ctx._call(lib.vkh2o_kvcache_create, ctx._ptr, d, out)
        self._ctx = ctx
        self._own(_Handle(out[0], lib.vkh2o_kvcache_destroy, ctx._h, "KVCache"))
        self._bufs = _DeviceBuffers(ctx, self._h)
        self.desc = struct_dict(lib.vkh2o_kvcache_get_desc(out[0]))
        self.plan = struct_dict(lib.vkh2o_kvcache_get_plan(out[0]))
        dd = self.desc
        self.layout = "expanded" if dd["layout"] == "expanded" else "latent"
        H = dd["num_heads"]
        if self.layout == "latent":
            self.q_shape = (H, dd["kv_lora_rank"] + dd["qk_rope_head_dim"])
            self.out_shape = (H, dd["kv_lora_rank"])
        else:
            self.q_shape = (H, dd["qk_nope_head_dim"] + dd["qk_rope_head_dim"])
            self.out_shape = (H, dd["v_head_dim"])
        self.row_numbers = lib.vkh2o_kvcache_row_numbers(lib.vkh2o_kvcache_get_desc(out[0]))

    @property
    def context(self):
        return self._ctx

    @property
    def _ptr(self):
        return self._h.get()

    @property
    def num_layers(self):
        return self.desc["num_layers"]

    @property
    def plan_bytes(self):
        """Device bytes of one layer: its arena and tables (vkh2o_kvcache_plan_bytes)."""
        return lib.vkh2o_kvcache_plan_bytes(lib.vkh2o_kvcache_get_plan(self._ptr))

    def token_bytes(self, tier):
        """Bytes per token of a tier ("fp16", "int8", ... or 0..3)."""
        t = TIERS.index(tier) if isinstance(tier, str) else operator.index(tier)
        return lib.vkh2o_kvcache_token_bytes(lib.vkh2o_kvcache_get_desc(self._ptr), t)

    def _layer(self, layer):
        layer = operator.index(layer)
        if not 0 <= layer < self.num_layers:
            raise ValueError("layer: %d is outside the cache's %d layers" % (layer, self.num_layers))
        return layer

    def reset(self):
        """Empties every layer (position 0, statistics zeroed)."""
        self._ctx._call(lib.vkh2o_run_kvcache_reset, self._ptr)

    def prefill(self, ckv=None, kpe=None, mass=None, k=None, v=None, layer=0):
        """Sets a layer to a prompt of n tokens (positions 0 .. n-1): LATENT ckv [n, kv_lora_rank]
        and kpe [n, qk_rope_head_dim], EXPANDED k [n, heads, nope + rope] and v [n, heads, v];
        mass [n] (each token's summed prompt attention; may be None when the cache does not
        select)."""
        layer = self._layer(layer)
        dd = self.desc
        p = ffi.new("vkh2o_kvcache_prefill*")
        p.layer = layer
        if self.layout == "latent":
            if ckv is None or kpe is None:
                raise ValueError("prefill: a latent cache takes ckv and kpe")
            a = _floats("ckv", ckv, (None, dd["kv_lora_rank"]))
            n = a.shape[0]
            b = _floats("kpe", kpe, (n, dd["qk_rope_head_dim"]))
            p.ckv = self._bufs.upload("ckv", a)
            p.kpe = self._bufs.upload("kpe", b)
        else:
            if k is None or v is None:
                raise ValueError("prefill: an expanded cache takes k and v")
            a = _floats("k", k, (None,) + self.q_shape)
            n = a.shape[0]
            b = _floats("v", v, (n,) + self.out_shape)
            p.k = self._bufs.upload("k", a)
            p.v = self._bufs.upload("v", b)
        if mass is not None:
            p.mass = self._bufs.upload("mass", _floats("mass", mass, (n,)))
        p.n = n
        self._ctx._call(lib.vkh2o_run_kvcache_prefill, self._ptr, p)

    def _row_inputs(self, what, n, ckv, kpe, k, v):
        """The n new rows' two inputs of the layout, checked: [(name, float32 array)]."""
        dd = self.desc
        if self.layout == "latent":
            if ckv is None or kpe is None:
                raise ValueError("%s: a latent cache takes ckv and kpe" % what)
            return [("ckv", _floats("ckv", ckv, (n, dd["kv_lora_rank"]))),
                    ("kpe", _floats("kpe", kpe, (n, dd["qk_rope_head_dim"])))]
        if k is None or v is None:
            raise ValueError("%s: an expanded cache takes k and v" % what)
        return [("k", _floats("k", k, (n,) + self.q_shape)), ("v", _floats("v", v, (n,) + self.out_shape))]

    def steps(self, q, ckv=None, kpe=None, k=None, v=None, layer=0):
        """n decode steps of one layer in one submission (each sees the one before): q [n, heads,
        ...] and LATENT ckv [n, kv_lora_rank], kpe [n, qk_rope_head_dim] or EXPANDED k [n, heads,
        nope + rope], v [n, heads, v]. Returns the attention outputs [n, heads, kv_lora_rank]
        (LATENT, before W_uv) or [n, heads, v_head_dim]."""
        layer = self._layer(layer)
        qa = _floats("q", q, (None,) + self.q_shape)
        n = qa.shape[0]
        if n == 0:
            raise ValueError("q: no steps")
        ins = self._row_inputs("step", n, ckv, kpe, k, v)
        bq = self._bufs.upload("q", qa)
        bufs = {name: self._bufs.upload(name, arr) for name, arr in ins}
        per = {name: arr[0].nbytes for name, arr in ins}
        out = np.empty((n,) + self.out_shape, dtype=np.float32)
        bo = self._bufs.get("out", out.nbytes)
        st = ffi.new("vkh2o_kvcache_step[]", n)
        for i in range(n):
            st[i].layer = layer
            st[i].q, st[i].q_offset = bq, i * qa[0].nbytes
            st[i].out, st[i].out_offset = bo, i * out[0].nbytes
            for name, b in bufs.items():
                setattr(st[i], name, b)
                setattr(st[i], name + "_offset", i * per[name])
        self._ctx._call(lib.vkh2o_run_kvcache_steps, self._ptr, st, n)
        return self._bufs.download(bo, out)

    def step_layers(self, q, ckv=None, kpe=None, k=None, v=None, first_layer=0):
        """One decode step of L independent layers at once, first_layer .. first_layer + L - 1, in
        one layer's dispatches (vkh2o_kvcache_step.num_layers; their inputs must all be known
        before the step, as in a simulation: a model's layers step one at a time): q [L, heads,
        ...] and LATENT ckv [L, kv_lora_rank], kpe [L, qk_rope_head_dim] or EXPANDED k [L, heads,
        nope + rope], v [L, heads, v]. The cache needs step_layers >= L. Returns the outputs
        [L, heads, ...], the same bit for bit as L calls of step()."""
        first = self._layer(first_layer)
        qa = _floats("q", q, (None,) + self.q_shape)
        n = qa.shape[0]
        if n == 0 or first + n > self.num_layers:
            raise ValueError("q: %d layers from layer %d; the cache has %d" % (n, first, self.num_layers))
        ins = self._row_inputs("step_layers", n, ckv, kpe, k, v)
        # one buffer of [layer][q | first input | second input], so that one stride serves all
        per = [qa[0].size] + [a[0].size for _, a in ins]
        block = np.concatenate([qa.reshape(n, -1)] + [a.reshape(n, -1) for _, a in ins], axis=1)
        if block.shape[1] % 4:   # a stride of whole 16-byte texels lets the query be read as texels
            block = np.pad(block, ((0, 0), (0, 4 - block.shape[1] % 4)))
        bin_ = self._bufs.upload("layers_in", np.ascontiguousarray(block, dtype=np.float32))
        out = np.empty((n,) + self.out_shape, dtype=np.float32)
        bo = self._bufs.get("out", out.nbytes)
        st = ffi.new("vkh2o_kvcache_step*")
        st.layer, st.num_layers = first, n
        st.in_stride, st.out_stride = block[0].nbytes, out[0].nbytes
        st.q, st.q_offset = bin_, 0
        st.out, st.out_offset = bo, 0
        off = per[0]
        for (name, _), m in zip(ins, per[1:]):
            setattr(st, name, bin_)
            setattr(st, name + "_offset", 4 * off)
            off += m
        self._ctx._call(lib.vkh2o_run_kvcache_step, self._ptr, st)
        return self._bufs.download(bo, out)

    def step(self, q, ckv=None, kpe=None, k=None, v=None, layer=0):
        """One decode step (append, attend, score, demote / evict): q [heads, ...], LATENT ckv
        [kv_lora_rank] and kpe [qk_rope_head_dim], EXPANDED k [heads, nope + rope] and v [heads, v].
        Returns the attention output [heads, kv_lora_rank] (LATENT) or [heads, v_head_dim]."""
        def one(name, a, shape):
            return None if a is None else _floats(name, a, shape)[None]
        dd = self.desc
        q1 = one("q", q, self.q_shape)
        if self.layout == "latent":
            return self.steps(q1, ckv=one("ckv", ckv, (dd["kv_lora_rank"],)),
                              kpe=one("kpe", kpe, (dd["qk_rope_head_dim"],)), layer=layer)[0]
        return self.steps(q1, k=one("k", k, self.q_shape), v=one("v", v, self.out_shape), layer=layer)[0]

    def stats(self, layer=0):
        """vkh2o_kvcache_stats of a layer as a dict (position, len, by_tier, demoted, evicted, ...)."""
        st = ffi.new("vkh2o_kvcache_stats*")
        self._ctx._call(lib.vkh2o_kvcache_read_stats, self._ptr, self._layer(layer), st)
        return struct_dict(st)

    def snapshot(self, layer=0, rows=False):
        """The held tokens of a layer, ordered by position (Snapshot)."""
        layer = self._layer(layer)
        total = self.plan["total_slots"]
        pos = np.empty(total, dtype=np.uint32)
        sc = np.empty(total, dtype=np.float32)
        ti = np.empty(total, dtype=np.uint8)
        rw = np.empty((total, self.row_numbers), dtype=np.float32) if rows else None
        s = ffi.new("vkh2o_kvcache_snapshot*")
        s.positions = ffi.from_buffer("uint32_t[]", pos, require_writable=True)
        s.scores = _out(sc)
        s.tiers = ffi.from_buffer("uint8_t[]", ti, require_writable=True)
        s.rows = _out(rw) if rows else ffi.NULL
        self._ctx._call(lib.vkh2o_kvcache_read_snapshot, self._ptr, layer, s)
        n = s.len
        return Snapshot(pos[:n].copy(), ti[:n].copy(), sc[:n].copy(), rw[:n].copy() if rows else None)

    def __repr__(self):
        if self.closed:
            return "<vkh2o.KVCache closed>"
        d = self.desc
        return "<vkh2o.KVCache %s %s policy=%s precision=%s kept=%d>" % (
            self.layout, "x".join(str(x) for x in self.q_shape), d["policy"], d["precision"], self.plan["kept_tokens"])


# ---------------------------------------------------------------------------------------------
# an MLA layer


class MLALayer(_Owned):
    """One MLA attention layer's weights on the device (vkh2o_mla_layer), read from a safetensors
    checkpoint: one .safetensors file (a shard holding the layer), a sharded index
    (model.safetensors.index.json, or the directory holding it), or a model directory. config: None (the
    config.json in the directory or beside the file, else Kimi K2.6), a preset name, a path to a
    config.json, or a dict of vkh2o_mla_config fields (on top of the config.json / default).
    max_seq_len, max_decode_tokens, max_obs_window: vkh2o_mla_layer_desc's."""

    def __init__(self, ctx, path, layer=0, config=None, input_layernorm=False, write_probs=False, **desc):
        import os
        self._ctx = ctx
        path = os.fspath(path)
        if isinstance(config, str) and not os.path.exists(config):
            cfg = mla_config(preset=config)
        elif isinstance(config, (str, os.PathLike)):
            cfg = mla_config(json=os.fspath(config))
        else:
            js = os.path.join(path, "config.json") if os.path.isdir(path) else \
                os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
            cfg = mla_config(dict(config) if config else None, json=js if os.path.isfile(js) else None)
        # a sharded index: its directory (vkh2o_checkpoint_open reads the index there)
        if os.path.basename(path) == "model.safetensors.index.json" and os.path.isfile(path):
            path = os.path.dirname(os.path.abspath(path))
        # a model directory: its index, else model.safetensors (as vkh2o_model_create reads it), else
        # its one .safetensors file (vkh2o_checkpoint_open)
        if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "model.safetensors.index.json")) and \
                os.path.isfile(os.path.join(path, "model.safetensors")):
            path = os.path.join(path, "model.safetensors")
        err = ffi.new("vkh2o_error*")
        ck = ffi.new("vkh2o_checkpoint**")
        _check_err(lib.vkh2o_checkpoint_open(path.encode(), ck, err), err)
        try:
            hw = ffi.new("vkh2o_mla_host_weights**")
            flags = lib.VKH2O_LOAD_INPUT_LAYERNORM if input_layernorm else 0
            _check_err(lib.vkh2o_mla_host_weights_load(ck[0], cfg, operator.index(layer), flags, hw, err), err)
            try:
                d = ffi.new("vkh2o_mla_layer_desc*")
                _set_fields(d, desc, "vkh2o_mla_layer_desc")
                if write_probs:
                    d.flags |= lib.VKH2O_MLA_WRITE_PROBS
                out = ffi.new("vkh2o_mla_layer**")
                ctx._call(lib.vkh2o_mla_layer_create, ctx._ptr, cfg, hw[0], d, out)
            finally:
                lib.vkh2o_mla_host_weights_destroy(hw[0])
        finally:
            lib.vkh2o_checkpoint_destroy(ck[0])
        self._own(_Handle(out[0], lib.vkh2o_mla_layer_destroy, ctx._h, "MLALayer"))
        self.config = struct_dict(lib.vkh2o_mla_layer_get_config(out[0]))
        self.max_seq_len = lib.vkh2o_mla_layer_get_max_seq_len(out[0])
        self.max_decode_tokens = lib.vkh2o_mla_layer_get_max_decode_tokens(out[0])
        self.weight_bytes = lib.vkh2o_mla_layer_get_weight_bytes(out[0])
        self.hidden_size = self.config["hidden_size"]

    @property
    def context(self):
        return self._ctx

    @property
    def softmax_scale(self):
        return lib.vkh2o_mla_softmax_scale(lib.vkh2o_mla_layer_get_config(self._h.get()))

    def kvcache(self, **desc):
        """A KVCache of this layer's shape and scale (desc: the cache's fields by name)."""
        return KVCache(self._ctx, mla=self, **desc)

    def forward(self, hidden, pos0=0):
        """The causal forward over hidden [S, hidden_size] at positions pos0..: (out [S, hidden_size],
        mass [S]: each key's attention summed over heads and queries)."""
        h = _floats("hidden", hidden, (None, self.hidden_size))
        S = h.shape[0]
        out = np.empty_like(h)
        mass = np.empty(S, dtype=np.float32)
        self._ctx._call(lib.vkh2o_host_mla_forward, self._h.get(), _fptr(h), S, operator.index(pos0), _out(out),
                        _out(mass), ffi.NULL)
        return out, mass

    def _check_cache(self, cache):
        if not isinstance(cache, KVCache):
            raise TypeError("cache: expected a vkh2o.KVCache, got %r" % type(cache).__name__)
        if cache._ctx is not self._ctx:
            raise ValueError("cache: it belongs to another Context")
        return cache._h.get()

    def prefill(self, cache, hidden, cache_layer=0):
        """The forward over a prompt hidden [P, hidden_size] at positions 0..P-1, its rows and attention
        mass into the cache's layer (vkh2o_host_mla_prefill). Returns out [P, hidden_size]."""
        c = self._check_cache(cache)
        h = _floats("hidden", hidden, (None, self.hidden_size))
        out = np.empty_like(h)
        self._ctx._call(lib.vkh2o_host_mla_prefill, self._h.get(), c, operator.index(cache_layer), _fptr(h),
                        h.shape[0], _out(out))
        return out

    def decode(self, cache, hidden, position=None, cache_layer=0):
        """Decodes n tokens hidden [n, hidden_size] (or one, [hidden_size]) against the cache: append,
        attend, score, demote / evict, per token (vkh2o_host_mla_decode, in chunks of
        max_decode_tokens). position: the first token's (RoPE); None: the cache's own counter."""
        c = self._check_cache(cache)
        h = np.asarray(hidden)
        one = h.ndim == 1
        h = _floats("hidden", h[None] if one else h, (None, self.hidden_size))
        out = np.empty_like(h)
        k = 0
        while k < h.shape[0]:
            n = min(self.max_decode_tokens, h.shape[0] - k)
            pos = POSITION_FROM_CACHE if position is None else operator.index(position) + k
            self._ctx._call(lib.vkh2o_host_mla_decode, self._h.get(), c, operator.index(cache_layer),
                            _fptr(h[k:k + n]), n, pos, _out(out[k:k + n]))
            k += n
        return out[0] if one else out

    def decode_inputs(self, hidden, position, layout="latent"):
        """A decode step's inputs without a cache (vkh2o_host_mla_decode_inputs) for n tokens at
        positions position..: LATENT (rows [n, kv_lora + rope], None, query [n, heads, kv_lora +
        rope]); EXPANDED (rows [n, heads, nope + rope], values [n, heads, v], query [n, heads,
        nope + rope]) -- what KVCache.step takes."""
        c = self.config
        h = _floats("hidden", hidden, (None, self.hidden_size))
        n, H = h.shape[0], c["num_heads"]
        lay = _enum_value(ffi.typeof("vkh2o_kv_layout"), layout, "layout")
        if lay == lib.VKH2O_LAYOUT_EXPANDED:
            rows = np.empty((n, H, c["qk_nope_head_dim"] + c["qk_rope_head_dim"]), np.float32)
            values = np.empty((n, H, c["v_head_dim"]), np.float32)
            query = np.empty_like(rows)
        else:
            rows = np.empty((n, c["kv_lora_rank"] + c["qk_rope_head_dim"]), np.float32)
            values = None
            query = np.empty((n, H, c["kv_lora_rank"] + c["qk_rope_head_dim"]), np.float32)
        self._ctx._call(lib.vkh2o_host_mla_decode_inputs, self._h.get(), _fptr(h), n, operator.index(position), lay,
                        _out(rows), _out(values) if values is not None else ffi.NULL, _out(query))
        return rows, values, query

    def __repr__(self):
        return "<vkh2o.MLALayer %s>" % ("closed" if self.closed else "hidden %d, %d heads" % (
            self.hidden_size, self.config["num_heads"]))


# ---------------------------------------------------------------------------------------------
# a whole model and its decoding sessions


class Model(_Owned):
    """A DeepSeek-V3-architecture model from a directory (config.json + safetensors) on the device
    (vkh2o_model). max_seq_len, max_obs_window: vkh2o_model_desc's."""

    def __init__(self, ctx, path, **desc):
        import os
        self._ctx = ctx
        d = ffi.new("vkh2o_model_desc*")
        _set_fields(d, desc, "vkh2o_model_desc")
        out = ffi.new("vkh2o_model**")
        ctx._call(lib.vkh2o_model_create, ctx._ptr, os.fspath(path).encode(), d, out)
        self._own(_Handle(out[0], lib.vkh2o_model_destroy, ctx._h, "Model"))
        self.path = os.fspath(path)
        self.config = struct_dict(lib.vkh2o_model_get_config(out[0]))
        self.vocab_size = self.config["vocab_size"]
        self.num_layers = self.config["attn"]["num_layers"]
        self.weight_bytes = lib.vkh2o_model_get_weight_bytes(out[0])
        self.max_seq_len = desc.get("max_seq_len") or 512

    @property
    def context(self):
        return self._ctx

    def forward(self, tokens, logits=True):
        """One causal forward (full cache) over tokens (ints or bytes): (logits [n, vocab] or None,
        next_logprobs [n - 1]: log p(tokens[i + 1] | tokens[..i]))."""
        t = _tokens("tokens", tokens, self.vocab_size)
        n = len(t)
        lg = np.empty((n, self.vocab_size), np.float32) if logits else None
        lp = np.empty(max(n - 1, 1), np.float32)
        self._ctx._call(lib.vkh2o_host_model_forward, self._h.get(), ffi.from_buffer("uint32_t[]", t), n,
                        _out(lg) if logits else ffi.NULL, _out(lp) if n > 1 else ffi.NULL)
        return lg, lp[:n - 1]

    def session(self, cache=None, **kw):
        """A decoding session under a cache policy (vkh2o_model_session). cache: a dict of fields;
        keyword arguments: vkh2o_model_cache_desc's (schedule, obs_window, pool, pool_size,
        max_tokens) or the cache's own (vkh2o_kvcache_desc: capacity_tokens, capacity_bytes,
        policy, precision, ...). No arguments: the full FP16 cache."""
        return Session(self, **dict(cache or {}, **kw))

    def __repr__(self):
        return "<vkh2o.Model %s>" % ("closed" if self.closed else "%s, %d layers" % (self.path, self.num_layers))


class Session(_Owned):
    """One sequence decoded under a cache policy: a vkh2o_kvcache per layer."""

    def __init__(self, model, **kw):
        self._model = model
        self._ctx = model._ctx
        d = ffi.new("vkh2o_model_cache_desc*")
        top = {k for k in _fields(d) if k != "kv"}
        kv = dict(kw.pop("kv", None) or {})
        _set_fields(d, {k: v for k, v in kw.items() if k in top}, "vkh2o_model_cache_desc")
        kv.update({k: v for k, v in kw.items() if k not in top})
        _set_fields(ffi.addressof(d[0], "kv"), kv, "vkh2o_kvcache_desc")
        out = ffi.new("vkh2o_model_session**")
        self._ctx._call(lib.vkh2o_model_session_create, model._h.get(), d, out)
        self._own(_Handle(out[0], lib.vkh2o_model_session_destroy, model._h, "Session"))
        self.desc = struct_dict(d)

    @property
    def model(self):
        return self._model

    @property
    def position(self):
        """Tokens seen so far (the next token's position)."""
        return lib.vkh2o_model_session_get_position(self._h.get())

    @property
    def cache_bytes(self):
        """Device bytes of every layer's cache (vkh2o_model_session_get_cache_bytes)."""
        return lib.vkh2o_model_session_get_cache_bytes(self._h.get())

    def cache_len(self, layer=0):
        n = ffi.new("uint32_t*")
        self._ctx._call(lib.vkh2o_model_session_read_cache_len, self._h.get(), operator.index(layer), n)
        return n[0]

    def kv_stats(self, layer=0):
        """Layer `layer`'s vkh2o_kvcache_stats as a dict."""
        st = ffi.new("vkh2o_kvcache_stats*")
        self._ctx._call(lib.vkh2o_model_session_read_kv_stats, self._h.get(), operator.index(layer), st)
        return struct_dict(st)

    def reset(self):
        """Empties every cache (position 0)."""
        self._ctx._call(lib.vkh2o_model_session_reset, self._h.get())

    def _run(self, fn, tokens, logits, logprobs):
        t = _tokens("tokens", tokens, self._model.vocab_size)
        n = len(t)
        lg = np.empty((n, self._model.vocab_size), np.float32) if logits else None
        lp = np.empty(max(n - 1, 1), np.float32) if logprobs else None
        self._ctx._call(fn, self._h.get(), ffi.from_buffer("uint32_t[]", t), n, _out(lg) if logits else ffi.NULL,
                        _out(lp) if logprobs and n > 1 else ffi.NULL)
        if logprobs:
            return lg, lp[:n - 1]
        return lg

    def prefill(self, tokens, logits=True, logprobs=False):
        """Prefills the empty session with a prompt (ints or bytes): logits [n, vocab]; with
        logprobs=True (logits or None, next_logprobs [n - 1])."""
        return self._run(lib.vkh2o_host_model_prefill, tokens, logits, logprobs)

    def decode(self, tokens, logits=True, logprobs=False):
        """Decodes tokens one step each (teacher-forced; one submission): logits [n, vocab], or [vocab]
        for a single int token; with logprobs=True (logits or None, next_logprobs [n - 1])."""
        single = isinstance(tokens, (int, np.integer))
        r = self._run(lib.vkh2o_host_model_decode, tokens, logits, logprobs)
        if single and logits and not logprobs:
            return r[0]
        return r

    def __repr__(self):
        return "<vkh2o.Session %s>" % ("closed" if self.closed else "at position %d" % self.position)


# ---------------------------------------------------------------------------------------------
# safetensors (host only)

_NP_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8, "U8": np.uint8,
              "I16": np.int16, "I32": np.int32, "I64": np.int64, "BOOL": np.bool_}


class SafeTensors(_Owned):
    """A safetensors file, validated and memory-mapped by the library (vkh2o_safetensors).
    st.keys(), st.info(name) -> (dtype name, shape), st[name] -> a NumPy copy (BF16 and F8_E4M3
    widened to float32 exactly)."""

    def __init__(self, path):
        import os
        err = ffi.new("vkh2o_error*")
        out = ffi.new("vkh2o_safetensors**")
        _check_err(lib.vkh2o_safetensors_open(os.fspath(path).encode(), out, err), err)
        self._own(_Handle(out[0], lib.vkh2o_safetensors_destroy, None, "SafeTensors"))

    def _view(self, name):
        v = ffi.new("vkh2o_tensor_view*")
        err = ffi.new("vkh2o_error*")
        _check_err(lib.vkh2o_safetensors_find(self._h.get(), name.encode(), v, err), err)
        return v

    def keys(self):
        p = self._h.get()
        v = ffi.new("vkh2o_tensor_view*")
        names = []
        for i in range(lib.vkh2o_safetensors_get_count(p)):
            if lib.vkh2o_safetensors_at(p, i, v) == lib.VKH2O_OK:
                names.append(ffi.string(v.name).decode())
        return names

    def __contains__(self, name):
        return name in self.keys()

    def info(self, name):
        v = self._view(name)
        return ffi.string(lib.vkh2o_dtype_name(v.dtype)).decode(), tuple(v.shape[i] for i in range(v.ndim))

    def __getitem__(self, name):
        v = self._view(name)
        dt = ffi.string(lib.vkh2o_dtype_name(v.dtype)).decode()
        shape = tuple(v.shape[i] for i in range(v.ndim))
        raw = ffi.buffer(v.data, v.nbytes)
        if dt in _NP_DTYPES:
            return np.frombuffer(raw, dtype=_NP_DTYPES[dt]).reshape(shape).copy()
        out = np.empty(shape, dtype=np.float32)
        r = lib.vkh2o_dtype_convert(lib.VKH2O_DTYPE_F32, ffi.from_buffer(out, require_writable=True), v.dtype, v.data,
                                    v.numel)
        if r != lib.VKH2O_OK:
            _raise(r, "%s: dtype %s cannot be converted" % (name, dt))
        return out


# ---------------------------------------------------------------------------------------------
# synthetic checkpoints (host only)

_SYNTH_DTYPES = {"bf16": "BF16", "f16": "F16", "f32": "F32", "fp8": "F8_E4M3"}


def _synthetic_layout(name):
    names = []
    for i in range(8):
        n = lib.vkh2o_synthetic_layout_name(i)
        if n == ffi.NULL:
            break
        names.append(ffi.string(n).decode())
    if name not in names:
        raise ValueError("layout: %r is not one of %s" % (name, ", ".join(names)))
    return names.index(name)


def _synthetic_dtype(name):
    spelled = _SYNTH_DTYPES.get(name, name)
    for v in (lib.VKH2O_DTYPE_F32, lib.VKH2O_DTYPE_F16, lib.VKH2O_DTYPE_BF16, lib.VKH2O_DTYPE_F8_E4M3):
        if ffi.string(lib.vkh2o_dtype_name(v)).decode() == spelled:
            return v
    raise ValueError("dtype: %r is not one of %s (or %s)" % (name, ", ".join(_SYNTH_DTYPES),
                                                             ", ".join(_SYNTH_DTYPES.values())))


class SyntheticCheckpoint(_Owned):
    """A synthetic checkpoint (vkh2o_synthetic, vkh2o/synthetic.h): MLA attention layers with the
    real HF tensor names and shapes of a config, random values that are deterministic for a seed
    and can each be recomputed without the files. Nothing is written until write().

    preset: a published config ("kimi-k2.6" = the default, "deepseek-v3", ...); config: a dict of
    vkh2o_mla_config fields on top of it (then the preset is only recorded in the files); layers;
    layout "deepseek-v3", "kimi-k2.6" or "kimi-k2.6-short"; dtype "bf16", "f16", "f32" or "fp8"
    (F8_E4M3 with 128x128 block scales); seed; embedding (a zero embed_tokens placeholder first);
    sharded (two shards + model.safetensors.index.json in a directory); generator: the name
    recorded as the program that made the files (default "vkh2o")."""

    def __init__(self, preset=None, config=None, layers=1, layout="deepseek-v3", dtype="bf16", seed=0,
                 embedding=False, sharded=False, generator=None):
        d = ffi.new("vkh2o_synthetic_desc*")
        keep = []
        if config is not None:
            cfg = mla_config(config, preset=preset)
            keep.append(cfg)
            d.config = cfg
        if preset is not None:
            keep.append(ffi.new("char[]", preset.encode()))
            d.preset = keep[-1]
        if generator is not None:
            keep.append(ffi.new("char[]", generator.encode()))
            d.generator = keep[-1]
        d.num_layers = operator.index(layers)
        if d.num_layers < 1:
            raise ValueError("layers: %d is not >= 1" % layers)
        d.layout = _synthetic_layout(layout)
        d.dtype = _synthetic_dtype(dtype)
        d.seed = operator.index(seed)
        d.embedding = bool(embedding)
        d.sharded = bool(sharded)
        err = ffi.new("vkh2o_error*")
        out = ffi.new("vkh2o_synthetic**")
        _check_err(lib.vkh2o_synthetic_create(d, out, err), err)
        self._own(_Handle(out[0], lib.vkh2o_synthetic_destroy, None, "SyntheticCheckpoint"))
        self._index = {t["name"]: i for i, t in enumerate(self.tensors)}

    @property
    def config(self):
        """The vkh2o_mla_config written, as a dict (num_layers = layers)."""
        return struct_dict(lib.vkh2o_synthetic_get_config(self._h.get()))

    @property
    def tensors(self):
        """Every tensor in file order: dicts of name, dtype (safetensors spelling), shape, layer
        (-1 outside the layers), weight (the vkh2o_mla_weight, None outside the layers), scale (an
        FP8 weight's weight_scale_inv) and shard (0, or 1 with sharded)."""
        p = self._h.get()
        t = ffi.new("vkh2o_synthetic_tensor*")
        out = []
        for i in range(lib.vkh2o_synthetic_get_count(p)):
            if lib.vkh2o_synthetic_get_tensor(p, i, t) != lib.VKH2O_OK:
                continue
            w = None if t.layer < 0 else ffi.string(lib.vkh2o_mla_weight_short_name(t.weight)).decode()
            out.append(dict(name=ffi.string(t.name).decode(), dtype=ffi.string(lib.vkh2o_dtype_name(t.dtype)).decode(),
                            shape=tuple(t.shape[k] for k in range(t.ndim)), layer=t.layer, weight=w,
                            scale=bool(t.scale), shard=t.shard))
        return out

    @property
    def weight_bytes(self):
        """Bytes of every tensor but the zero placeholders."""
        return lib.vkh2o_synthetic_get_weight_bytes(self._h.get())

    def values(self, name):
        """Tensor `name` as the file holds it, as a float32 NumPy array of its shape (an FP8 weight
        times its block scales: what the library's weight loader reads back)."""
        p = self._h.get()
        if name not in self._index:
            raise KeyError("%s: no such tensor in this synthetic checkpoint" % name)
        i = self._index[name]
        t = ffi.new("vkh2o_synthetic_tensor*")
        lib.vkh2o_synthetic_get_tensor(p, i, t)
        out = np.empty(tuple(t.shape[k] for k in range(t.ndim)), dtype=np.float32)
        r = lib.vkh2o_synthetic_get_values(p, i, 0, out.size, _out(out))
        if r != lib.VKH2O_OK:
            _raise(r, name)
        return out

    def write(self, path, config_path=None, overwrite=False):
        """Writes the files (vkh2o_synthetic_write): path is the .safetensors file (sharded: the
        directory, made if absent); config.json goes beside it unless config_path says where.
        Existing outputs are refused (vkh2o.IoError naming them) unless overwrite. Returns path."""
        import os
        o = ffi.new("vkh2o_synthetic_output*")
        p = ffi.new("char[]", os.fspath(path).encode())
        c = ffi.new("char[]", os.fspath(config_path).encode()) if config_path is not None else ffi.NULL
        o.path, o.config_path, o.overwrite = p, c, bool(overwrite)
        err = ffi.new("vkh2o_error*")
        _check_err(lib.vkh2o_synthetic_write(self._h.get(), o, err), err)
        return path

    def __repr__(self):
        if self.closed:
            return "<vkh2o.SyntheticCheckpoint closed>"
        return "<vkh2o.SyntheticCheckpoint %d tensors, %d layer(s), %d weight bytes>" % (
            len(self._index), self.config["num_layers"], self.weight_bytes)


def write_synthetic_checkpoint(path, preset=None, config=None, layers=1, layout="deepseek-v3", dtype="bf16", seed=0,
                               embedding=False, sharded=False, config_path=None, overwrite=False, generator=None):
    """Writes a synthetic checkpoint (what vkh2o-mkshard writes) and returns its
    SyntheticCheckpoint, whose values(name) recomputes any tensor without the files. The arguments
    are SyntheticCheckpoint's and write()'s."""
    s = SyntheticCheckpoint(preset=preset, config=config, layers=layers, layout=layout, dtype=dtype, seed=seed,
                            embedding=embedding, sharded=sharded, generator=generator)
    try:
        s.write(path, config_path=config_path, overwrite=overwrite)
    except BaseException:
        s.close()
        raise
    return s
