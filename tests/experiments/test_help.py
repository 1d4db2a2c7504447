"""Every benchmark and paper-table script answers ``--help``: argparse formats each help string
with ``%``, so a bare "%" in one (a "5 % budget") crashed ``verify_cost --help`` before the
reader saw any option."""

import importlib
import sys

import pytest

SCRIPTS = [f"benchmarks.{name}" for name in (
    "api_decode", "decode_speed", "drafters", "int8_agreement", "peers", "quantized_dots",
    "throughput", "verify_cost")] + [f"paper_repro.{name}" for name in (
        "ablations", "audit", "sdsl_family", "table1", "theory")]


@pytest.mark.parametrize("module", SCRIPTS)
def test_help_prints_and_exits_cleanly(module, monkeypatch, capsys):
    main = importlib.import_module(module).main
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0
    assert "usage:" in capsys.readouterr().out
