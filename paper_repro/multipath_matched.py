"""Which multi-path verifier does best, and when: every lossless multi-draft verifier on the same
drafts, as a fraction of the tree optimum.

Why: arXiv 2602.16994 leaves open which multi-path verification method performs best and under
what conditions. Sampled comparisons cannot settle it at the margins that separate these
verifiers (a few per cent of E[tau]), and comparisons across papers use different drafts. Here
every number is an exact float64 law of one iteration, so every verifier sees the same drafts
(the exact law sums over every draft set with its probability), and the yardstick is the exact LP
optimum over all stateless lossless verifiers (``algorithms.exact.lp_optimum``).

Laws: a base target with logits log Dirichlet(c) per context (c = 0.3 "peaked", c = 3 "flat") and
a draft whose logits are the target's plus N(0, sigma^2) noise per token (sigma = 1: a draft
correlated with its target, as real drafts are), both then sampled at temperature T:
p = softmax(l_p / T), q = softmax(l_q / T). V = 3, L = 2, K in {2, 3, 4}, T in {0.3, 0.6, 1.0},
SEEDS seeds per cell. Verifiers: every registered one that claims lossless, takes any K and
i.i.d. drafts, and drafts the usual way (``greedy_draft`` brings its own drafting and is left
out; engine rules with their own draft structures are judged by the referee instead).

Run: ``python -m paper_repro.multipath_matched`` (writes paper_repro/results/multipath_matched.md
and .json).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from algorithms.exact import expected_tau, get_exact_law, iteration_law
from algorithms.exact.lp_optimum import optimal_expected_tau
from algorithms.exact.models import ToyModel, _ctx_rng
from algorithms.verifiers import IID, get_verifier, list_verifiers
from specjax.platform import hardware, provenance

RESULTS = Path(__file__).parent / "results"
SHAPES = {"peaked": 0.3, "flat": 3.0}
TEMPERATURES = (0.3, 0.6, 1.0)
KS = (2, 3, 4)
V, L, SIGMA = 3, 2, 1.0
SEEDS = range(3)
#: Verifiers with their own drafting scheme (not K i.i.d. drafts from q).
OWN_DRAFTING = {"greedy_draft"}


@dataclass(frozen=True)
class TemperedModel(ToyModel):
    """Target (``noise=0``) or draft (``noise=sigma``) of one seeded base: logits
    log Dirichlet(c) at each context, plus Gaussian noise for the draft, over T."""

    seed: int = 0
    concentration: float = 1.0
    noise: float = 0.0
    temperature: float = 1.0

    def law(self, ctx):
        base = np.log(_ctx_rng(self.seed, ctx).dirichlet(np.full(self.V, self.concentration)))
        if self.noise:
            base = base + self.noise * _ctx_rng(10_000 + self.seed, ctx).standard_normal(self.V)
        z = base / self.temperature
        w = np.exp(z - z.max())
        return w / w.sum()


def pair(shape: str, T: float, seed: int) -> tuple[ToyModel, ToyModel]:
    c = SHAPES[shape]
    return (TemperedModel(V, seed, c, 0.0, T), TemperedModel(V, seed, c, SIGMA, T))


def verifiers() -> list[str]:
    """The lossless multi-draft i.i.d. verifiers (see the module docstring)."""
    out = []
    for name in sorted(list_verifiers()):
        v = get_verifier(name)
        structures = getattr(v, "draft_structures", frozenset({IID}))
        if (v.lossless and v.max_drafts is None and IID in structures
                and name not in OWN_DRAFTING and not hasattr(v, "referee_drafts")):
            out.append(name)
    return out


def measure(names: list[str], seeds=SEEDS, ks=KS, temperatures=TEMPERATURES,
            shapes=tuple(SHAPES)) -> list[dict]:
    """One row per (shape, T, K, seed): the LP optimum and every verifier's exact E[tau]."""
    rows = []
    for shape in shapes:
        for T in temperatures:
            for K in ks:
                for seed in seeds:
                    P, Q = pair(shape, T, seed)
                    lp = optimal_expected_tau(P, Q, L=L, K=K)
                    taus = {n: expected_tau(iteration_law(get_exact_law(n), P, Q, L=L, K=K))
                            for n in names}
                    over = {n: t for n, t in taus.items() if t > lp + 1e-9}
                    if over:  # a lossless verifier cannot beat the optimum: a bug somewhere
                        raise AssertionError(f"{shape} T={T} K={K} seed={seed}: {over} > LP {lp}")
                    rows.append({"shape": shape, "T": T, "K": K, "seed": seed, "lp": lp,
                                 "tau": taus})
    return rows


def cells(rows: list[dict]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault((r["shape"], r["T"], r["K"]), []).append(r)
    return out


def fraction(rs: list[dict], name: str) -> float:
    """Mean over seeds of E[tau] / LP optimum."""
    return float(np.mean([r["tau"][name] / r["lp"] for r in rs]))


def winners(rows: list[dict], names: list[str]) -> dict[tuple, str]:
    """Per cell, the verifier with the highest mean fraction (ties within 1e-9: all named)."""
    out = {}
    for key, rs in cells(rows).items():
        f = {n: fraction(rs, n) for n in names}
        best = max(f.values())
        out[key] = " = ".join(n for n in names if f[n] >= best - 1e-9)
    return out


def markdown(rows: list[dict], names: list[str], seconds: float, argv: list[str]) -> str:
    cmd = " ".join(["python -m paper_repro.multipath_matched", *argv])
    lines = ["# Matched multi-path comparison: E[tau] as a fraction of the tree optimum", "",
             f"Generated by `{cmd}`; do not edit by hand. Exact float64 laws, no sampling "
             f"({seconds:.0f} s). **Commit:** {provenance.commit()}. **Machine:** "
             f"{hardware.describe()}.", "",
             f"Every verifier sees the same drafts: K i.i.d. blocks of L = {L} from q, V = {V}. "
             "Laws: target logits log Dirichlet(c) per context (c = 0.3 peaked, 3 flat), draft "
             f"logits = target's + N(0, {SIGMA:g}) noise, both at temperature T. Each cell: the "
             f"mean over {len(SEEDS)} seeds of E[tau] / (LP optimum over every stateless "
             "lossless verifier, `algorithms/exact/lp_optimum.py`); the best per row in bold. "
             "LP column: its mean E[tau].", "",
             "| laws | T | K | LP E[tau] | " + " | ".join(names) + " |",
             "|---|---|---|---|" + "---|" * len(names)]
    win = winners(rows, names)
    for (shape, T, K), rs in cells(rows).items():
        f = {n: fraction(rs, n) for n in names}
        best = max(f.values())
        vals = [f"**{f[n]:.4f}**" if f[n] >= best - 1e-9 else f"{f[n]:.4f}" for n in names]
        lp = np.mean([r["lp"] for r in rs])
        lines.append(f"| {shape} | {T:g} | {K} | {lp:.4f} | " + " | ".join(vals) + " |")
    lines += ["", "## Who wins where", ""]
    tally: dict[str, int] = {}
    for w in win.values():
        for n in w.split(" = "):
            tally[n] = tally.get(n, 0) + 1
    ranked = sorted(tally, key=lambda n: -tally[n])
    lines.append("Best (highest mean fraction) in: "
                 + ", ".join(f"{n} {tally[n]} of {len(win)} cells" for n in ranked) + ".")
    lines += ["", "| laws | T | K | best |", "|---|---|---|---|"]
    lines += [f"| {s} | {T:g} | {K} | {w} |" for (s, T, K), w in win.items()]
    worst = {n: min(fraction(rs, n) for rs in cells(rows).values()) for n in names}
    lines += ["", "Worst cell per verifier (the fraction of the optimum it can fall to here): "
              + ", ".join(f"{n} {worst[n]:.4f}" for n in names) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    names = verifiers()
    t0 = time.perf_counter()
    rows = measure(names)
    seconds = time.perf_counter() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    md = markdown(rows, names, seconds, [] if argv is None else argv)
    (args.out / "multipath_matched.md").write_text(md)
    (args.out / "multipath_matched.json").write_text(json.dumps(
        {"commit": provenance.commit(), "hardware": hardware.describe(), "V": V, "L": L,
         "sigma": SIGMA, "verifiers": names, "rows": rows}, indent=1))
    print(md)


if __name__ == "__main__":
    main()
