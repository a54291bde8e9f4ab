"""Shared fixtures. Every context the tests make has the Khronos validation layer on (as the C
suites' tests/common does) and must end with no validation message; without a device the tests
skip, or fail under VKH2O_REQUIRE_DEVICE=1 (what `scripts/vkh2o.sh test` sets)."""
import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("VKH2O_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "python"))

import vkh2o  # noqa: E402

MODEL = os.path.join(SRC, "models", "tiny-mla")
# The default run (the README's test command) leaves a few slow variants to the full run
# (VKH2O_TEST_FULL=1, CI's test-full), as the C suites do, and takes one case of a few pairs
# (one_of_two below): they show as skipped.
FULL = os.environ.get("VKH2O_TEST_FULL", "0") == "1"
full_only = pytest.mark.skipif(not FULL, reason="the full run's (VKH2O_TEST_FULL=1)")
# Of a pair of cases the default run takes one, which one turning with the seed (VKH2O_TEST_SEED,
# else the clock; printed in the header, so that VKH2O_TEST_SEED=N repeats the run's part); the
# other shows as skipped. The full run takes both.
SEED = int(os.environ.get("VKH2O_TEST_SEED") or "0", 0) or time.time_ns() // 1000


def one_of_two(i):
    """Case i (0 or 1) of a pair: the default run takes the one the seed picks."""
    return pytest.mark.skipif(not FULL and (SEED + i) % 2 != 0,
                              reason="the pair's other case in this default run (seed %d; VKH2O_TEST_FULL=1 runs both)" % SEED)


def pytest_report_header(config):
    return "vkh2o: %s, seed %d (VKH2O_TEST_SEED=%d repeats this run's part)" % (
        "full run" if FULL else "default run", SEED, SEED)
EVAL_TEXT = os.path.join(MODEL, "eval.txt")


def build_dir():
    """The CMake build folder the tools are in (ctest sets VKH2O_BUILD_DIR)."""
    return os.environ.get("VKH2O_BUILD_DIR") or os.path.join(SRC, "build")


def _require():
    return os.environ.get("VKH2O_REQUIRE_DEVICE", "") not in ("", "0")


_made = []


def new_context(**kw):
    """A validated context; its validation messages are checked at the end of the session."""
    kw.setdefault("validation", True)
    try:
        c = vkh2o.Context(**kw)
    except vkh2o.NoDeviceError as e:
        if _require():
            pytest.fail("no usable Vulkan device (%s) and VKH2O_REQUIRE_DEVICE=1" % e)
        pytest.skip("no Vulkan device: %s" % e)
    _made.append(c)
    return c


def check_validation(c):
    if not c.closed:
        assert c.validation_messages == 0, "validation-layer messages: %s" % c.messages


@pytest.fixture(scope="session")
def ctx():
    c = new_context()
    yield c
    check_validation(c)
    c.close()


@pytest.fixture(autouse=True)
def _no_validation_messages():
    """After each test, every live validated context has had no validation message."""
    yield
    for c in _made:
        check_validation(c)


@pytest.fixture(scope="session")
def tiny_model(ctx):
    """The committed model as vkh2o-eval opens it for --ctx 128."""
    import vkh2o.eval as ev
    return ev.load_model(ctx, MODEL, ctx_len=128)
