"""The README's "Add a verifier in one file", followed on a copy of the repository.

One new file in ``algorithms/verifiers/`` (the rule and, beside it in the same file, its exact
law) and no other edit: ``specjax-run verifier=<name>`` runs it, the contract tests of
``tests/algorithms/test_all_verifiers.py`` (exact losslessness included) take it, and the docs
check names the page and rows it still lacks. Each step runs in a subprocess with the copy
first on ``sys.path``, so what it finds is the copy's registry, not this checkout's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAME = "throwaway"

# Token-wise speculative sampling written again from the contract's helpers: a rule the
# contract tests can hold to every claim (lossless, T = 0 longest prefix), with its exact law.
THROWAWAY = '''"""Token-wise speculative sampling, written again as a throwaway (Leviathan et al.
2023, Algorithm 1): the README's one-file verifier, made by a test."""

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp

from algorithms.exact.token import token_law
from algorithms.verifiers.base import (
    DETERMINISTIC, IID, emit, residual, safe_ratio, sample, validate_inputs)
from algorithms.verifiers.registry import register


def throwaway_law(P, Q, ctx, state=(), **options):
    """The exact law: token-wise speculative sampling's."""
    return token_law(P, Q, ctx, state, **options)


@register("throwaway", exact_law=throwaway_law)
@dataclass(frozen=True, kw_only=True)
class ThrowawayVerifier:
    """Token-wise speculative sampling, rewritten (a test's throwaway)."""

    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = 1
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID, DETERMINISTIC})

    def init_state(self, L, V):
        return ()

    def __call__(self, key, drafts, q, p, state=()):
        _, L, _ = validate_inputs(self, drafts, q, p)
        x, q, p = drafts[0], q[0], p[0]
        k_coin, k_extra = jax.random.split(key)
        pos = jnp.arange(L)
        u = jax.random.uniform(k_coin, (L,))
        accept = (u < safe_ratio(p[pos, x], q[pos, x])) & (q[pos, x] > 0)
        tau = jnp.where(accept.all(), L, jnp.argmin(accept)).astype(jnp.int32)
        i = jnp.minimum(tau, L - 1)
        law = jnp.where(tau == L, p[L], residual(p[i], q[i], fallback=p[i]))
        return emit(x, tau, sample(k_extra, law), jnp.int32(0)), state
'''


@pytest.fixture(scope="module")
def house(tmp_path_factory) -> Path:
    """A copy of the repository's code, configs, docs and tests, plus the one new file."""
    copy = tmp_path_factory.mktemp("house")
    skip = shutil.ignore_patterns("__pycache__", "*.gguf", "goldens")
    for folder in ("algorithms", "specjax", "experiments", "configs", "docs", "tests"):
        shutil.copytree(ROOT / folder, copy / folder, symlinks=True, ignore=skip)
    for name in ("README.md", "mkdocs.yml", "pyproject.toml"):
        shutil.copy(ROOT / name, copy / name)
    (copy / "algorithms" / "verifiers" / f"{NAME}.py").write_text(THROWAWAY)
    return copy


def run(house: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(house))
    return subprocess.run([sys.executable, *args], cwd=house, env=env, capture_output=True,
                          text=True, timeout=900, check=False)


def test_the_new_file_runs_from_specjax_run(house, tmp_path):
    out = tmp_path / "run"
    proc = run(house, "-m", "experiments.run", f"verifier={NAME}", "experiment=toy_smoke",
               "logger=none", "ar_baseline=false", "breakdown=false", f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "results.jsonl").read_text().splitlines()[-1])
    assert summary["verifier"] == NAME
    assert summary["config"]["verifier"]["_target_"] == ("algorithms.verifiers.throwaway."
                                                         "ThrowawayVerifier")
    assert summary["speculative"]["new_tokens"] > 0


def test_the_contract_tests_take_the_new_file(house):
    """Every test over the registry in ``tests/algorithms`` runs the new rule and passes."""
    proc = run(house, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "tests/algorithms",
               "-k", NAME)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ran = set(re.findall(r"^PASSED tests/algorithms/(\S+?)::(\w+)\[", proc.stdout, re.M))
    contract = ("test_temperature_zero_accepts_the_longest_matching_prefix",
                "test_verdict_properties_on_random_laws", "test_state_keeps_a_fixed_shape",
                "test_bad_inputs_raise_value_errors", "test_claimed_losslessness_holds_exactly")
    for test in [("test_all_verifiers.py", t) for t in contract] + [
            ("test_one_step_law.py", "test_one_step_law_matches_exact_law"),
            ("test_float64.py", "test_float64_monte_carlo_matches_exact_law"),
            ("test_bounds.py", "test_lossless_verifiers_stay_below_the_bound")]:
        assert test in ran, (test, sorted(ran))


def test_the_docs_check_names_what_the_new_file_lacks(house):
    proc = run(house, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_docs.py",
               "-k", "every_registered_verifier")
    assert proc.returncode != 0
    for missing in (f"{NAME}: no page docs/verifiers/{NAME}.md",
                    f"{NAME}: no entry in mkdocs.yml's Verifiers nav",
                    f"{NAME}: no row in README.md's Verifiers table",
                    f"{NAME}: no row in docs/verifiers/index.md's table"):
        assert missing in proc.stdout, proc.stdout[-3000:]
