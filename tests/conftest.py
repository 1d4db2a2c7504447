import os

# Tests run on CPU; W&B never reaches the network from a test.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# specjax-run keeps compiled loops on disk (specjax.platform.compile_cache); tests compile
# their own.
os.environ["SPECJAX_COMPILE_CACHE"] = "0"

# The default suite is compile-bound: most tests jit a fresh decode loop or vmapped verifier and
# run it briefly. XLA's backend optimisation level changes how fast the compiled code runs, not
# what it computes, and level 0 halves the suite's wall time on 2 cores (measured: decoder +
# real-model + tree tests 134 s -> 63 s, verifier Monte Carlo tests 102 s -> 71 s). XLA:CPU's
# newer fusion emitters compile about twice as slowly as its elemental emitters for the same
# fusions (the toy greedy == AR tests: 17.7 s -> 8.3 s of XLA compile, 27 s -> 17 s in all), so
# the tests use the latter. Benchmarks never run under pytest. SPECJAX_TEST_XLA_OPT=1 tests the
# default (optimised) compile instead.
# Tests that start their own JAX process (a forced device count) pass the same flags on through
# SPECJAX_TEST_XLA_FLAGS, so their compiles are as cheap as this process's.
if os.environ.get("SPECJAX_TEST_XLA_OPT") != "1":
    os.environ["SPECJAX_TEST_XLA_FLAGS"] = ("--xla_backend_optimization_level=0 "
                                           "--xla_llvm_disable_expensive_passes=true "
                                           "--xla_cpu_use_fusion_emitters=false")
    os.environ["XLA_FLAGS"] = " ".join(filter(None, [
        os.environ.get("XLA_FLAGS", ""), os.environ["SPECJAX_TEST_XLA_FLAGS"]]))

# One persistent compilation cache per test run, shared by the xdist workers and the JAX
# processes tests start: many tests trace the same programs (a verifier's vmapped call at a
# common shape, a decode loop of a shared toy pair), and from the second time on XLA
# deserializes the executable instead of compiling it. Programs are keyed by their HLO, the
# compile options and the jaxlib version, so a shared executable is one the test would have
# compiled itself. A fresh directory per run (the pytest process's id; xdist's workers inherit
# it through the environment), so no run reads an older one;
# SPECJAX_TEST_COMPILE_CACHE=0 turns it off.
if os.environ.get("SPECJAX_TEST_COMPILE_CACHE", "1") != "0":
    import tempfile

    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                          os.path.join(tempfile.gettempdir(), f"specjax-test-xla-{os.getpid()}"))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    import jax  # a plugin may have imported it before this file: set what the env would have

    jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


# Where the suite's time goes. It is compile-bound, so each test's report carries the seconds
# JAX spent tracing, lowering and compiling (or loading from the cache above) during it, and the
# session ends with one line of totals; SPECJAX_TEST_COMPILE_REPORT=N also lists the N test
# files that compile longest. The listeners run in every xdist worker; the numbers travel to the
# controller in the reports' user_properties.
import collections  # noqa: E402

import pytest  # noqa: E402
from jax import monitoring  # noqa: E402

_JAX_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
               "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
               "/jax/core/compile/backend_compile_duration": "compile",
               "/jax/compilation_cache/compile_time_saved_sec": "saved"}
_jax_time = collections.Counter()


def _on_jax_duration(event, duration, **_):
    if event in _JAX_EVENTS:
        _jax_time[_JAX_EVENTS[event]] += duration
        _jax_time[_JAX_EVENTS[event] + "_n"] += 1


monitoring.register_event_duration_secs_listener(_on_jax_duration)


_reported = collections.Counter()  # this process's totals at its last report
_session_compile = collections.defaultdict(collections.Counter)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    # The phase has run when its report is made: it gets what accumulated since the last one.
    delta = {k: v - _reported[k] for k, v in _jax_time.items() if v != _reported[k]}
    _reported.update(delta)
    if delta:
        outcome.get_result().user_properties.append(("jax_compile", delta))


def pytest_runtest_logreport(report):
    for name, value in report.user_properties:
        if name == "jax_compile":
            _session_compile[report.nodeid.split("::")[0]].update(value)


def pytest_terminal_summary(terminalreporter):
    if not _session_compile:
        return
    total = sum(_session_compile.values(), collections.Counter())
    terminalreporter.write_line(
        f"JAX: {total['compile_n']:.0f} programs compiled or loaded in {total['compile']:.0f} s "
        f"({total['saved_n']:.0f} from the cache, saving {total['saved']:.0f} s), tracing "
        f"{total['trace']:.0f} s, lowering {total['lower']:.0f} s (summed over workers)")
    top = int(os.environ.get("SPECJAX_TEST_COMPILE_REPORT", "0") or 0)
    for path, c in sorted(_session_compile.items(), key=lambda kv: -kv[1]["compile"])[:top]:
        terminalreporter.write_line(
            f"  {c['compile']:7.1f} s compile, {c['compile_n']:5.0f} programs "
            f"({c['saved_n']:.0f} cached), trace {c['trace']:5.1f} s, lower {c['lower']:5.1f} s"
            f"  {path}")
