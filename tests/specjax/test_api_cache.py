"""generate's cache of compiled loops is bounded: a long sweep must not keep every executable."""

import specjax
from specjax import api

FAST = {"xla_backend_optimization_level": 0}


def test_compiled_loops_beyond_the_bound_are_dropped_least_recent_first(monkeypatch):
    monkeypatch.setattr(api, "_COMPILED", type(api._COMPILED)())
    monkeypatch.setattr(api, "MAX_COMPILED", 2)

    def run(n):
        return specjax.generate("toy-target", ["0 1 2"], max_new_tokens=n, compiler_options=FAST,
                                progress=False).summary["compile_time_s"]

    assert run(2) > 0 and run(3) > 0
    assert run(2) == 0  # still cached, and now the most recent
    assert run(4) > 0  # a third shape: the least recent (3 tokens) goes
    assert len(api._COMPILED) == 2
    assert run(2) == 0 and run(3) > 0
