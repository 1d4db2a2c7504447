"""Cost of one jitted verify call for every registered verifier at a real vocabulary size.

Why: a verifier is only worth its extra accepted tokens if its own cost stays small next to the
target's verify pass (SpecTr-GBV reports ~53% less verification overhead than SpecTr's per-node
bisection; docs/verifiers/spectr_gbv.md). This times ``jax.jit(verifier)`` on random laws at
V = 151,936 (the Qwen2 vocabulary), K drafts of length L, and reports the median wall time of
repeated calls after a warm-up compile, optionally as a percentage of a given target verify pass.

Inputs are random softmax laws: draft logits ~ N(0, 2^2), target logits = draft logits +
N(0, 1), so acceptance is neither ~0 nor ~1; drafts are sampled from q, and every draft shares
the root laws (p[:, 0], q[:, 0]) as the verifier contract requires. Shapes, not values, set the
cost of most verifiers; the few with data-dependent loops see typical acceptance here.

    python -m benchmarks.verify_cost [--tree-ms 850] [--K 4 8] [--L 8] [--calls 20]
        [--out paper_repro/results/verify_cost.md]

Budget: every verifier within 5 % of the target's tree pass at K = 4, L = 8. The tree
pass defaults to the Qwen2.5-Coder-1.5B tree(K=4, L=8) row of the committed decode_speed results
(``paper_repro/results/decode_speed_cpu.json``, measured on this machine); ``--tree-ms`` overrides
it, and the table names its source. Times on a shared machine rise with its load, so the 1-minute
load average is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from algorithms.verifiers import get_verifier, list_verifiers
from specjax.platform import hardware

QWEN2_VOCAB = 151_936
DECODE_SPEED = Path(__file__).resolve().parents[1] / "paper_repro/results/decode_speed_cpu.json"
TREE_MODEL, TREE_PASS = "qwen2.5-coder-1.5b-instruct", "tree 4x8"
BUDGET = 0.05  # a verifier may cost at most this fraction of the tree pass


def random_inputs(key, *, K: int, L: int, V: int):
    """(drafts [K, L], q [K, L, V], p [K, L+1, V]) with shared root laws."""
    k_q, k_p, k_d = jax.random.split(key, 3)
    q_logits = 2.0 * jax.random.normal(k_q, (K, L + 1, V))
    p_logits = q_logits + jax.random.normal(k_p, (K, L + 1, V))
    q_logits = q_logits.at[:, 0].set(q_logits[0, 0])
    p_logits = p_logits.at[:, 0].set(p_logits[0, 0])
    q = jax.nn.softmax(q_logits[:, :L], axis=-1)
    p = jax.nn.softmax(p_logits, axis=-1)
    drafts = jax.random.categorical(k_d, q_logits[:, :L], axis=-1).astype(jnp.int32)
    return drafts, q, p


def time_verifier(verifier, drafts, q, p, *, calls: int, warmup: int, seed: int) -> float:
    """Median milliseconds of one jitted call (results blocked on), after ``warmup`` calls."""
    K, L = drafts.shape
    state = verifier.init_state(L, q.shape[-1])
    fn = jax.jit(verifier)
    keys = jax.random.split(jax.random.key(seed), warmup + calls)
    for i in range(warmup):
        jax.block_until_ready(fn(keys[i], drafts, q, p, state))
    times = []
    for i in range(warmup, warmup + calls):
        start = time.perf_counter()
        jax.block_until_ready(fn(keys[i], drafts, q, p, state))
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def measure(names: Sequence[str], Ks: Sequence[int], Ls: Sequence[int], *, V: int, calls: int,
            warmup: int, seed: int) -> dict[tuple[str, int, int], float]:
    results = {}
    for K in Ks:
        for L in Ls:
            drafts, q, p = random_inputs(jax.random.key(seed), K=K, L=L, V=V)
            for name in names:
                verifier = get_verifier(name)
                if verifier.max_drafts is not None and K > verifier.max_drafts:
                    continue  # single-draft verifiers run at K = 1 only
                results[(name, K, L)] = time_verifier(verifier, drafts, q, p, calls=calls,
                                                      warmup=warmup, seed=seed + 1)
    return results


def measured_tree_ms(path: Path = DECODE_SPEED) -> float | None:
    """The 1.5B tree(K=4, L=8) pass from the committed decode_speed results: the row of
    ``load_model``'s default layout (the packed kernel on CPU), best of the settings timed."""
    if not path.exists():
        return None
    results = json.loads(path.read_text())
    for row in results["rows"]:
        if row["model"] == TREE_MODEL and row["pass_"] == TREE_PASS:
            return min(row[f"ms_{s}"] for s in results["settings"])
    return None


def render(results, names, Ks, Ls, *, tree_ms: float, tree_source: str, V: int,
           calls: int) -> str:
    """The table as markdown (header line, then one row per verifier)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cols = [(K, L) for K in Ks for L in Ls]
    lines = [f"verify cost, V={V}, median of {calls} jitted calls on "
             f"{hardware.describe()} (load {load:.1f}): ms (% of "
             f"a {tree_ms:g} ms tree pass, {tree_source}; budget {100 * BUDGET:g} %)", "",
             "| verifier | " + " | ".join(f"K={K} L={L}" for K, L in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for name in names:
        cells = []
        for K, L in cols:
            ms = results.get((name, K, L))
            if ms is None:
                cells.append("–")
            else:
                share = ms / tree_ms
                mark = "" if share <= BUDGET else " **over**"
                cells.append(f"{ms:.2f} ({100 * share:.1f}%{mark})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=QWEN2_VOCAB)
    parser.add_argument("--K", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--L", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--verifiers", nargs="+", default=None,
                        help=f"default: every registered one ({', '.join(list_verifiers())})")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tree-ms", "--target-ms", dest="tree_ms", type=float, default=None,
                        help="the target's tree pass (K=4, L=8) on this machine, in ms; each "
                             "time is printed as a %% of it (default: the 1.5B tree 4x8 row of "
                             f"{DECODE_SPEED.name})")
    parser.add_argument("--out", type=Path, default=None,
                        help="also write the table (markdown) to this file")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.warmup < 1:
        parser.error("--calls and --warmup must be >= 1")
    if args.tree_ms is not None and args.tree_ms <= 0:
        parser.error("--tree-ms must be > 0")
    names = args.verifiers or list_verifiers()
    unknown = sorted(set(names) - set(list_verifiers()))
    if unknown:
        parser.error(f"unknown verifiers {unknown}; allowed: {', '.join(list_verifiers())}")
    results = measure(names, args.K, args.L, V=args.vocab, calls=args.calls, warmup=args.warmup,
                      seed=args.seed)
    if args.tree_ms is not None:
        tree_ms, source = args.tree_ms, "given with --tree-ms"
    elif (tree_ms := measured_tree_ms()) is not None:
        source = f"{TREE_MODEL} {TREE_PASS} measured by decode_speed ({DECODE_SPEED.name})"
    else:
        parser.error(f"no {DECODE_SPEED.name} to take the tree pass from; pass --tree-ms")
    table = render(results, names, args.K, args.L, tree_ms=tree_ms, tree_source=source,
                   V=args.vocab, calls=args.calls)
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        command = " ".join(["python -m benchmarks.verify_cost",
                            *(sys.argv[1:] if argv is None else argv)])
        args.out.write_text(f"# Verifier cost at the Qwen2 vocabulary\n\nGenerated by "
                            f"`{command}`.\n\n{table}\n")


if __name__ == "__main__":
    main()
