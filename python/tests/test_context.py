"""Context, errors, lifetimes."""
import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import vkh2o
from conftest import SRC, new_context


def small_cache(ctx, **kw):
    d = dict(num_heads=2, kv_lora_rank=16, qk_rope_head_dim=8, max_tokens=64)
    d.update(kw)
    return vkh2o.KVCache(ctx, **d)


def test_context_reports_its_device(ctx):
    assert ctx.device_name and isinstance(ctx.device_name, str)
    caps = ctx.caps
    assert caps["device_name"] == ctx.device_name
    assert caps["device_type"] in ("other", "integrated_gpu", "discrete_gpu", "virtual_gpu", "cpu")
    lim = ctx.limits
    assert lim["max_storage_buffer_range"] > 0 and len(lim["max_workgroup_count"]) == 3
    ms = ctx.memory_stats
    assert set(ms) == {"device_bytes", "device_allocations", "peak_device_bytes"}
    assert ctx.validation
    assert ctx.last_error == "" or isinstance(ctx.last_error, str)
    assert any(d["device_name"] == ctx.device_name for d in vkh2o.devices())
    assert "vkh2o.Context" in repr(ctx)


def test_device_index_out_of_range_is_an_error():
    with pytest.raises(vkh2o.InvalidArgumentError) as e:
        vkh2o.Context(device=999, validation=True)
    assert e.value.code == vkh2o.lib.VKH2O_ERROR_INVALID_ARGUMENT
    assert e.value.result == "VKH2O_ERROR_INVALID_ARGUMENT"
    assert isinstance(e.value, ValueError) and isinstance(e.value, vkh2o.Error)


def test_errors_carry_the_librarys_message(ctx):
    with pytest.raises(vkh2o.BudgetError) as e:   # 2 sinks + 4 recents do not fit a capacity of 4
        small_cache(ctx, capacity_tokens=4, n_sink=2, n_recent=4)
    assert "capacity" in str(e.value) and e.value.message == str(e.value)
    assert str(e.value).startswith("VKH2O_ERROR_BUDGET: ")
    with pytest.raises(vkh2o.IoError, match="config.json: cannot open"):
        vkh2o.Model(ctx, "/no-such-dir")
    with pytest.raises(vkh2o.InvalidArgumentError, match="decay"):
        vkh2o.resolve_kvcache(num_heads=1, kv_lora_rank=8, qk_rope_head_dim=8, max_tokens=8, decay=1.5,
                              score_mode="decay", capacity_tokens=6)
    # one class per result code
    codes = {c.code for c in vkh2o._ERRORS.values()}
    assert len(codes) == 14 and all(issubclass(c, vkh2o.Error) for c in vkh2o._ERRORS.values())


def test_close_and_context_manager():
    c = new_context()
    with c:
        cache = small_cache(c)
        assert not cache.closed
    assert c.closed and cache.closed
    with pytest.raises(vkh2o.ClosedError):
        cache.snapshot()
    with pytest.raises(vkh2o.ClosedError):
        c.memory_stats
    with pytest.raises(vkh2o.ClosedError):
        small_cache(c)
    c.close()   # twice is fine
    cache.close()
    assert "closed" in repr(cache) and "closed" in repr(c)


def test_a_cache_outlives_del_ctx():
    c = new_context()
    cache = small_cache(c, capacity_tokens=16, n_sink=2, n_recent=4)
    del c
    gc.collect()
    rng = np.random.default_rng(1)
    cache.prefill(ckv=rng.standard_normal((10, 16)), kpe=rng.standard_normal((10, 8)), mass=rng.random(10))
    out = cache.step(rng.standard_normal((2, 24)), ckv=rng.standard_normal(16), kpe=rng.standard_normal(8))
    assert out.shape == (2, 16) and np.all(np.isfinite(out))
    assert cache.context.validation_messages == 0
    assert len(cache.snapshot()) == 11
    ctx = cache.context
    del cache
    gc.collect()
    assert ctx.memory_stats["device_bytes"] == 0   # the cache and its buffers went with it
    ctx.close()


def test_a_session_outlives_del_model_and_del_ctx(tiny_model):
    c = new_context()
    model = vkh2o.Model(c, tiny_model.path, max_seq_len=64)
    s = model.session(capacity_tokens=16, n_sink=2, n_recent=4)
    del model, c
    gc.collect()
    logits = s.prefill(b"The sky is blue.")
    assert logits.shape == (16, 256) and s.decode(int(logits[-1].argmax())).shape == (256,)
    ctx = s.model.context
    assert ctx.validation_messages == 0
    del s
    gc.collect()
    assert ctx.memory_stats["device_bytes"] == 0   # the session and its model went with it
    ctx.close()


def test_a_closed_cache_raises_and_makes_nothing(ctx):
    rng = np.random.default_rng(4)
    before = ctx.memory_stats
    cache = small_cache(ctx, capacity_tokens=16, n_sink=2, n_recent=4)
    cache.prefill(ckv=rng.standard_normal((4, 16)), kpe=rng.standard_normal((4, 8)), mass=rng.random(4))
    cache.close()
    assert ctx.memory_stats["device_bytes"] == before["device_bytes"]
    calls = (lambda: cache.prefill(ckv=np.zeros((2, 16)), kpe=np.zeros((2, 8)), mass=np.ones(2)),
             lambda: cache.step(np.zeros((2, 24)), ckv=np.zeros(16), kpe=np.zeros(8)),
             lambda: cache.steps(np.zeros((3, 2, 24)), ckv=np.zeros((3, 16)), kpe=np.zeros((3, 8))),
             cache.snapshot, cache.stats, cache.reset, lambda: cache.plan_bytes, lambda: cache.token_bytes("int8"))
    for call in calls:
        with pytest.raises(vkh2o.ClosedError, match="KVCache is closed"):
            call()
    # no device buffer was made for the refused calls
    assert ctx.memory_stats["device_bytes"] == before["device_bytes"]
    assert ctx.memory_stats["device_allocations"] == before["device_allocations"]
    with pytest.raises(vkh2o.ClosedError):
        with cache:
            pass


def test_closing_the_context_closes_what_came_from_it(tiny_model):
    c = new_context()
    model = vkh2o.Model(c, tiny_model.path, max_seq_len=64)
    s = model.session()
    cache = small_cache(c)
    c.close()
    for obj, call in ((s, lambda: s.prefill(b"abc")), (model, lambda: model.forward(b"abc")),
                      (cache, lambda: cache.stats())):
        assert obj.closed
        with pytest.raises(vkh2o.ClosedError):
            call()


def test_closing_a_model_closes_its_sessions(ctx, tiny_model):
    model = vkh2o.Model(ctx, tiny_model.path, max_seq_len=64)
    s = model.session()
    model.close()
    assert s.closed
    with pytest.raises(vkh2o.ClosedError):
        s.decode(1)


def test_memory_returns_when_objects_are_collected(ctx):
    before = ctx.memory_stats["device_bytes"]
    caches = [small_cache(ctx, capacity_tokens=16, n_sink=2, n_recent=4) for _ in range(3)]
    assert ctx.memory_stats["device_bytes"] > before
    del caches
    gc.collect()
    assert ctx.memory_stats["device_bytes"] == before


def test_log_callback_gets_the_messages():
    seen = []
    c = new_context(log=lambda level, msg: seen.append((level, msg)))
    with pytest.raises(vkh2o.Error):
        small_cache(c, capacity_tokens=4, n_sink=2, n_recent=4)
    assert c.last_error
    c.close()


def _import_in_subprocess(env_extra):
    env = dict(os.environ, **env_extra)
    env["PYTHONPATH"] = os.path.join(SRC, "python")
    return subprocess.run([sys.executable, "-c", "import vkh2o"], capture_output=True, text=True, env=env)


def test_a_missing_library_says_how_to_build_it():
    p = _import_in_subprocess({"VKH2O_LIBRARY": "/nonexistent/libvkh2o.so"})
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: vkh2o:") and "scripts/vkh2o.sh python" in last, p.stderr


def test_a_library_found_nowhere_says_how_to_build_it(tmp_path):
    """The package copied away from the source tree, with no _libpath.txt and no VKH2O_LIBRARY."""
    import shutil
    pkg = tmp_path / "vkh2o"
    pkg.mkdir()
    for f in ("__init__.py", "_ffi.py", "eval.py"):
        shutil.copy(os.path.join(SRC, "python", "vkh2o", f), pkg / f)
    env = {k: v for k, v in os.environ.items() if k != "VKH2O_LIBRARY"}
    env.update(PYTHONPATH=str(tmp_path), VKH2O_INCLUDE_DIR=os.path.join(SRC, "include"), LD_LIBRARY_PATH="")
    p = subprocess.run([sys.executable, "-c", "import vkh2o"], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path))
    if p.returncode == 0:
        pytest.skip("a libvkh2o.so is installed system-wide (ctypes.util.find_library found it)")
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: vkh2o: the shared library libvkh2o.so was not found"), p.stderr
    assert "bash scripts/vkh2o.sh python" in last and "VKH2O_LIBRARY" in last
    assert "cffi" not in p.stderr   # one message, no traceback into the binding


def test_a_library_that_does_not_load_says_how_to_rebuild_it(tmp_path):
    bad = tmp_path / "libvkh2o.so"
    bad.write_text("not a shared library\n")
    p = _import_in_subprocess({"VKH2O_LIBRARY": str(bad)})
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: vkh2o: %s could not be loaded" % bad), p.stderr
    assert "scripts/vkh2o.sh python" in last


def test_missing_headers_say_where_they_were_looked_for():
    p = _import_in_subprocess({"VKH2O_INCLUDE_DIR": "/nonexistent", "VKH2O_LIBRARY": vkh2o.LIBRARY_PATH})
    # the source tree's include/ is the fallback: it still imports
    assert p.returncode == 0, p.stderr
