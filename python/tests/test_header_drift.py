"""The binding against the headers, at test time (so it follows every change of the headers):

- the cdef is the preprocessed public headers (vkh2o/_ffi.py), so names cannot drift; what can
  is the layout cffi computes in ABI mode (with a stub for the few Vulkan types). Every struct's
  size and alignment, every field's offset and every enum constant cffi has are compared with the
  C compiler's, compiling the real headers (<vulkan/vulkan_core.h> included);
- every function the headers declare resolves in the loaded library (a stale libvkh2o fails);
- every lib.vkh2o_* / lib.VKH2O_* the package uses, and every struct field it sets or reads by
  name, is declared."""
import os
import re
import subprocess

import pytest

import vkh2o
from vkh2o import _ffi, ffi, lib

from conftest import SRC


def _decls():
    return ffi._parser._declarations   # cffi's parsed cdef: "function NAME", "struct NAME", "typedef NAME", ...


def _structs():
    out = {}
    for key, (tp, _q) in _decls().items():
        kind, _, name = key.partition(" ")
        if kind == "typedef" and name.startswith("vkh2o_") and getattr(tp, "fldnames", None) is not None:
            out[name] = tp.fldnames
    return out


def _functions():
    return sorted(k.split(" ", 1)[1] for k in _decls() if k.startswith("function "))


def _enum_constants():
    return sorted(n for n in dir(lib) if n.startswith(("VKH2O_", "VK_PHYSICAL_DEVICE_TYPE_")) and
                  isinstance(getattr(lib, n), int) and not n.endswith("MAX_ENUM"))


def _compile_and_run(tmp_path, body):
    cc = _ffi._compiler()
    src = tmp_path / "layout.c"
    src.write_text('#include <stdio.h>\n#include <stddef.h>\n#include <stdalign.h>\n#include "vkh2o.h"\n'
                   "int main(void) {\n" + body + "return 0;\n}\n")
    exe = tmp_path / "layout"
    inc = _ffi.include_dir(vkh2o.LIBRARY_PATH)
    p = subprocess.run(cc + ["-std=c11", "-I", inc, str(src), "-o", str(exe)], capture_output=True, text=True)
    if p.returncode and "vulkan/vulkan_core.h" in p.stderr:
        pytest.skip("the Vulkan headers are not installed: %s" % p.stderr.strip().splitlines()[0])
    assert p.returncode == 0, p.stderr
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


def test_struct_layouts_match_the_compiler(tmp_path):
    structs = _structs()
    assert {"vkh2o_kvcache_desc", "vkh2o_kvcache_plan", "vkh2o_kvcache_stats", "vkh2o_context_desc",
            "vkh2o_device_caps", "vkh2o_model_cache_desc", "vkh2o_mla_config"} <= set(structs)
    lines, want = [], {}
    for name, fields in sorted(structs.items()):
        lines.append('printf("%s %%zu %%zu\\n", sizeof(%s), alignof(%s));' % (name, name, name))
        want[name] = "%s %d %d" % (name, ffi.sizeof(name), ffi.alignof(name))
        for f in fields:
            lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (name, f, name, f))
            want[name + "." + f] = "%s.%s %d" % (name, f, ffi.offsetof(name, f))
    for c in _enum_constants():
        lines.append('printf("%s %%lld\\n", (long long)%s);' % (c, c))
        want[c] = "%s %d" % (c, getattr(lib, c))
    got = _compile_and_run(tmp_path, "\n".join(lines)).splitlines()
    assert len(got) == len(want)
    bad = [(w, g) for w, g in zip(sorted(want.values()), sorted(got)) if w != g]
    assert not bad, "cffi (ABI mode) and the C compiler disagree: %s" % bad[:10]


def test_every_declared_function_is_in_the_library():
    missing = []
    for fn in _functions():
        try:
            getattr(lib, fn)
        except AttributeError:
            missing.append(fn)
    assert not missing, "declared in the headers but not exported by %s (a stale build?): %s" % (
        vkh2o.LIBRARY_PATH, missing)
    assert len(_functions()) > 100


def _package_sources():
    d = os.path.join(SRC, "python", "vkh2o")
    return "".join(open(os.path.join(d, f)).read() for f in sorted(os.listdir(d)) if f.endswith(".py"))


def test_every_name_the_package_uses_is_declared():
    src = _package_sources()
    names = set(re.findall(r"\blib\.((?:vkh2o|VKH2O)_\w+)", src))
    assert len(names) > 40
    undeclared = [n for n in sorted(names) if not hasattr(lib, n)]
    assert not undeclared, undeclared
    # the types the package allocates
    types = set(re.findall(r'ffi\.new\("(vkh2o_[^"]+)"', src))
    assert "vkh2o_kvcache_desc*" in types
    for t in types:
        ffi.typeof(t)


# the fields the package and vkh2o.eval set or read by name, per struct
USED_FIELDS = {
    "vkh2o_kvcache_desc": ["num_layers", "num_heads", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                           "v_head_dim", "scale", "max_tokens", "capacity_tokens", "capacity_bytes", "n_sink",
                           "n_recent", "n_protect", "policy", "score_mode", "decay", "seed", "precision",
                           "tier_tokens", "group_size", "tier_mask", "layout", "requant_source"],
    "vkh2o_kvcache_plan": ["total_slots", "kept_tokens"],
    "vkh2o_kvcache_stats": ["position", "len", "by_tier", "evicted", "bytes_used", "shadow_bytes"],
    "vkh2o_kvcache_step": ["layer", "q", "q_offset", "out", "out_offset", "ckv", "ckv_offset", "kpe", "kpe_offset",
                           "k", "k_offset", "v", "v_offset"],
    "vkh2o_kvcache_prefill": ["layer", "n", "ckv", "kpe", "mass", "k", "v"],
    "vkh2o_kvcache_snapshot": ["len", "positions", "scores", "tiers", "rows"],
    "vkh2o_model_cache_desc": ["kv", "schedule", "obs_window", "pool", "pool_size", "max_tokens"],
    "vkh2o_model_desc": ["max_seq_len", "max_obs_window"],
    "vkh2o_context_desc": ["device_select", "flags", "log"],
    "vkh2o_device_caps": ["device_name", "max_storage_buffer_range", "device_local_bytes"],
    "vkh2o_memory_stats": ["device_bytes", "device_allocations", "peak_device_bytes"],
    "vkh2o_model_config": ["attn", "vocab_size"],
    "vkh2o_mla_config": ["num_layers", "hidden_size", "num_heads", "kv_lora_rank", "qk_rope_head_dim",
                         "qk_nope_head_dim", "v_head_dim"],
    "vkh2o_mla_layer_desc": ["flags"],
    "vkh2o_tensor_view": ["name", "dtype", "ndim", "shape", "numel", "data", "nbytes"],
    "vkh2o_error": ["message"],
    "vkh2o_eval_policy_info": ["id", "name", "help", "full", "policy", "score_mode", "schedule", "obs"],
    "vkh2o_eval_ladder_info": ["id", "name", "precision", "fp16", "int8", "kept"],
    "vkh2o_eval_desc": ["ctx", "policy", "budget", "budget_frac", "n_sink", "n_recent", "n_protect", "decay",
                        "obs_window", "pool", "pool_size", "ladder", "kv", "precision", "bytes_frac", "tier_tokens",
                        "group_size", "tier_mask", "requant", "requant_source", "seed", "progress"],
    "vkh2o_eval_config": ["session", "forward", "n_sink", "budget", "n_recent", "cache_tokens", "kv_name"],
    "vkh2o_eval_perplexity": ["bytes_scored", "bits_per_byte", "held_bytes", "shadow_bytes"],
    "vkh2o_eval_recall": ["at", "first_bits", "second_bits", "first_bits_mean", "second_bits_mean"],
    "vkh2o_eval_passkey_desc": ["trials", "ndepths", "depths", "stream"],
    "vkh2o_eval_passkey": ["accuracy", "by_depth"],
    "vkh2o_eval_cache_error_desc": ["configs", "n_configs", "n_prompt", "n_steps", "ckv", "kpe", "mass", "q", "out",
                                    "layer", "hidden", "ref_rows", "ref_len", "progress"],
    "vkh2o_eval_cache_error": ["desc", "plan", "stats", "device_bytes", "ref_bytes", "ratio", "nmse", "max_rel"],
}


@pytest.mark.parametrize("struct", sorted(USED_FIELDS))
def test_fields_the_package_uses_are_declared(struct):
    fields = dict(ffi.typeof(struct).fields)
    assert not [f for f in USED_FIELDS[struct] if f not in fields]


def test_new_desc_fields_are_reachable_by_name():
    """Every field of the cache desc is a keyword argument (bound by name, whatever the header adds)."""
    for name, f in ffi.typeof("vkh2o_kvcache_desc").fields:
        d = ffi.new("vkh2o_kvcache_desc*")
        v = {"enum": 0, "array": [0], "primitive": 0}[f.type.kind]
        vkh2o._set_fields(d, {name: v}, "vkh2o_kvcache_desc")
