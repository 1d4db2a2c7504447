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

Random laws understate what the decode loop pays, for two reasons (issue 44):

- ``--mode agree``: real code drafts agree. The K drafts are one block, with one shared q per
  depth, peaked at T = 0.4 and p close to q, so acceptance is high and every depth has K
  survivors (SpecTr searches rho at all L depths, not only at the root). ``--mode npz
  --inputs F.npz`` times saved real inputs instead: keys ``drafts`` [N, K, L] int32, ``q``
  [N, K, L, V] float32, ``p`` [N, K, L+1, V] float32 (N recorded calls; a file of one call may
  drop the N axis), the verifier's own arguments after the sampling transform, as
  ``benchmarks.dump_verify_inputs`` records them inside the decode loop (``save_inputs`` writes
  the same format). Call i runs on recorded call i mod N, and the table puts every verifier's
  random-law time at the same K, L, V beside it, measured in the same run, with their ratio.
- ``--in-loop``: times the verifier the way the decode loop calls it on a batch of one
  (``specjax.decode.engine.per_sequence``). Until that function existed the loop called it under
  ``jax.vmap`` at batch 1 too, and under vmap a ``lax.cond`` whose predicate depends on the data
  runs *both* branches (a select): SpecTr K = 3 cost 42.6 ms in the loop against 15.3 ms alone
  on agreeing drafts (Xeon family 6 model 167, loaded machine).

    python -m benchmarks.verify_cost [--tree-ms 850] [--K 4 8] [--L 8] [--calls 20]
        [--mode random|agree|npz] [--inputs F.npz] [--in-loop]
        [--out paper_repro/results/verify_cost_xeon.md]

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
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from algorithms.verifiers import get_verifier, list_verifiers
from specjax.decode.engine import per_sequence
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


def agree_inputs(key, *, K: int, L: int, V: int, temperature: float = 0.4):
    """(drafts, q, p) for K drafts that agree over the whole block, as real code drafts do.

    Per depth one law pair: draft logits ~ N(0, 2^2) plus a spike of 12 at the drafted token,
    target logits = draft logits + N(0, 0.3^2), both at ``temperature``. Every draft carries the
    same tokens and the same q rows (i.i.d. drafts that share a prefix share their laws)."""
    k_q, k_p, k_t = jax.random.split(key, 3)
    tokens = jax.random.randint(k_t, (L + 1,), 0, V)
    q_logits = (2.0 * jax.random.normal(k_q, (L + 1, V))).at[jnp.arange(L + 1), tokens].add(12.0)
    p_logits = q_logits + 0.3 * jax.random.normal(k_p, (L + 1, V))
    q = jax.nn.softmax(q_logits[:L] / temperature, axis=-1)
    p = jax.nn.softmax(p_logits / temperature, axis=-1)
    drafts = jnp.broadcast_to(tokens[:L], (K, L)).astype(jnp.int32)
    return drafts, jnp.broadcast_to(q, (K, L, V)), jnp.broadcast_to(p, (K, L + 1, V))


def save_inputs(path: Path, drafts, q, p) -> None:
    """Write verifier inputs in the format ``load_inputs`` reads (see the module docstring):
    one call ([K, L], ...) or N stacked calls ([N, K, L], ...)."""
    np.savez_compressed(path, drafts=np.asarray(drafts, np.int32),
                        q=np.asarray(q, np.float32), p=np.asarray(p, np.float32))


def load_inputs(path: Path):
    """(drafts [N, K, L] int32, q [N, K, L, V] float32, p [N, K, L+1, V] float32) from a .npz
    file of N stacked calls, or of one call without the N axis (then N = 1)."""
    with np.load(path) as f:
        drafts, q, p = f["drafts"], f["q"], f["p"]
    if drafts.ndim == 2:
        drafts, q, p = drafts[None], q[None], p[None]
    if (drafts.ndim != 3 or q.ndim != 4 or q.shape[:3] != drafts.shape
            or p.shape != (*drafts.shape[:2], drafts.shape[2] + 1, q.shape[-1])):
        raise ValueError(f"{path}: shapes drafts {drafts.shape}, q {q.shape}, p {p.shape} do "
                         "not fit [N, K, L], [N, K, L, V], [N, K, L+1, V]")
    return (jnp.asarray(drafts, jnp.int32), jnp.asarray(q, jnp.float32),
            jnp.asarray(p, jnp.float32))


def time_verifier(verifier, drafts, q, p, *, calls: int, warmup: int, seed: int,
                  in_loop: bool = False, transform=None) -> float:
    """Median milliseconds of one jitted call (results blocked on), after ``warmup`` calls;
    ``in_loop``: on a batch of one, as the decode loop calls it (``per_sequence``). Inputs of
    one call ([K, L], ...) or of N calls ([N, K, L], ...): call i then runs on input i mod N.
    ``transform``: ``p`` holds logits, and this sampling transform turns them into the target
    laws inside the same program, as the loop's ``finish`` does."""
    if drafts.ndim == 2:
        drafts, q, p = drafts[None], q[None], p[None]
    N, K, L = drafts.shape
    state = verifier.init_state(L, q.shape[-1])
    if transform is not None:
        verifier = partial(lambda v, key, d, qq, logits, s: v(key, d, qq, transform(logits), s),
                           verifier)
    fn = jax.jit(verifier)
    cases = [(drafts[i], q[i], p[i]) for i in range(N)]
    if in_loop:
        batched = jax.jit(lambda *a: per_sequence(verifier, *a))
        state = jax.tree.map(lambda x: x[None], state)
        cases = [tuple(x[None] for x in case) for case in cases]

        def fn(key, *args):
            return batched(key[None], *args)
    keys = jax.random.split(jax.random.key(seed), warmup + calls)
    return median_ms(lambda i: fn(keys[i], *cases[i % N], state), calls=calls, warmup=warmup)


def median_ms(call, *, calls: int, warmup: int) -> float:
    """Median milliseconds of ``call(i)`` (results blocked on) for i after ``warmup`` calls."""
    for i in range(warmup):
        jax.block_until_ready(call(i))
    times = []
    for i in range(warmup, warmup + calls):
        start = time.perf_counter()
        jax.block_until_ready(call(i))
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def measure(names: Sequence[str], Ks: Sequence[int], Ls: Sequence[int], *, V: int, calls: int,
            warmup: int, seed: int, mode: str = "random", inputs: Path | None = None,
            in_loop: bool = False, temperature: float | None = None
            ) -> dict[tuple[str, int, int], float]:
    """{(name, K, L): ms}; in npz mode {(name, K, L, "real" | "random"): ms}, the random-law
    time at the file's (K, L, V) measured right after the real one. With ``temperature`` (npz
    mode) also (name, K, L, "transform"): the verifier with the sampling transform in its
    program, on logits that give the recorded p, and "transform alone"."""
    results, logits, transform = {}, None, None
    if mode == "npz":  # one (K, L, V) from the file; single-draft verifiers take draft 0
        drafts, q, p = load_inputs(inputs)
        Ks, Ls, V = [drafts.shape[1]], [drafts.shape[2]], q.shape[-1]
        if temperature is not None:
            transform, logits = transform_inputs(p, temperature)
            results["transform alone"] = time_transform(transform, logits, calls=calls,
                                                        warmup=warmup)
    for K in Ks:
        for L in Ls:
            if mode != "npz":
                make = agree_inputs if mode == "agree" else random_inputs
                drafts, q, p = make(jax.random.key(seed), K=K, L=L, V=V)
            for name in names:
                verifier = get_verifier(name)
                one = verifier.max_drafts is not None and K > verifier.max_drafts
                if one and mode != "npz":
                    continue  # single-draft verifiers run at K = 1 only
                time_it = partial(time_verifier, verifier, calls=calls, warmup=warmup,
                                  seed=seed + 1, in_loop=in_loop)
                if mode != "npz":
                    results[(name, K, L)] = time_it(*((drafts[:1], q[:1], p[:1]) if one
                                                      else (drafts, q, p)))
                    continue
                k = 1 if one else K
                results[(name, K, L, "real")] = time_it(drafts[:, :k], q[:, :k], p[:, :k])
                if logits is not None:
                    results[(name, K, L, "transform")] = time_it(
                        drafts[:, :k], q[:, :k], logits[:, :k], transform=transform)
                results[(name, K, L, "random")] = time_it(*random_inputs(
                    jax.random.key(seed), K=k, L=L, V=V))
    return results


def transform_inputs(p, temperature: float):
    """(the loop's sampling transform at ``temperature``, logits it maps to ``p``): T log p,
    -inf where p = 0. Why: the dump holds the laws after the transform; the loop computes them
    from logits in the verifier's own program, where the transform over K (L + 1) rows of the
    vocabulary may cost more than alone (XLA runs it beside the verifier's independent work)."""
    from specjax.models.sampling import Sampling

    logits = jnp.where(p > 0, temperature * jnp.log(jnp.where(p > 0, p, 1.0)), -jnp.inf)
    return Sampling(temperature=temperature), logits


def time_transform(transform, logits, *, calls: int, warmup: int) -> float:
    """Median milliseconds of the transform alone on one recorded call's logits."""
    fn = jax.jit(transform)
    return median_ms(lambda i: fn(logits[i % len(logits)]), calls=calls, warmup=warmup)


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
           calls: int, setting: str = "random laws") -> str:
    """The table as markdown (header line, then one row per verifier)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cols = [(K, L) for K in Ks for L in Ls]
    lines = [f"verify cost, V={V}, {setting}, median of {calls} jitted calls on "
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


#: An in-place cost above this many times the random-law cost is flagged (issue 44).
IN_PLACE_LIMIT = 3.0


def render_in_place(results, names, K: int, L: int, *, tree_ms: float, tree_source: str, V: int,
                    calls: int, inputs: Path, meta: dict | None, in_loop: bool) -> str:
    """Real (recorded) inputs beside random laws at the same shapes, one row per verifier."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    where = (f"{meta['calls']} calls recorded in the decode loop ({meta['target']} / "
             f"{meta['draft']}, {meta['dataset']}, K = {meta['K']}, L = {meta['L']}, T = "
             f"{meta['temperature']}, decoded by {meta['verifier']}, commit {meta['commit']})"
             if meta else f"the calls in {inputs}")
    lines = [f"verify cost in place, V={V}, K={K}, L={L}: median of {calls} jitted calls"
             f"{' on a batch of 1 as in the decode loop' if in_loop else ''} on "
             f"{hardware.describe()} (load {load:.1f}); real inputs: {where}; random laws at "
             f"the same shapes timed right after each. ms (% of a {tree_ms:g} ms tree pass, "
             f"{tree_source}); single-draft verifiers take draft 0 (K = 1)."]
    alone = results.get("transform alone")
    if alone is not None:
        lines[-1] += (
            " *With the transform*: the verifier and the sampling transform (T = "
            f"{meta['temperature']}) in one program, as the loop's step runs them, on logits "
            f"T log p that give the recorded laws; the transform alone takes {alone:.2f} ms "
            "here. The two columns differ by more than that where XLA runs the transform "
            "beside the verifier's work that does not wait for it.")
    extra = " with the transform |" if alone is not None else ""
    lines += ["", f"| verifier | K | real inputs |{extra} random laws | real / random |",
              "|---|---:|---:|" + ("---:|" if alone is not None else "") + "---:|---:|"]
    share = lambda ms: f"{ms:.2f} ({100 * ms / tree_ms:.1f}%)"  # noqa: E731
    for name in names:
        real, rand = results.get((name, K, L, "real")), results.get((name, K, L, "random"))
        if real is None:
            continue
        cap = get_verifier(name).max_drafts
        ratio = real / rand
        mark = f" **> {IN_PLACE_LIMIT:g}x**" if ratio > IN_PLACE_LIMIT else ""
        both = results.get((name, K, L, "transform"))
        lines.append(f"| {name} | {1 if cap is not None and K > cap else K} | {share(real)} |"
                     + (f" {share(both)} |" if both is not None else "")
                     + f" {share(rand)} | {ratio:.2f}{mark} |")
    return "\n".join(lines)


def inputs_meta(path: Path) -> dict | None:
    """The provenance ``dump_verify_inputs`` stored beside the arrays, if any."""
    with np.load(path) as f:
        return json.loads(str(f["meta"])) if "meta" in f.files else None


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=QWEN2_VOCAB)
    parser.add_argument("--K", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--L", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--verifiers", nargs="+", default=None,
                        help=f"default: every registered one ({', '.join(list_verifiers())})")
    parser.add_argument("--mode", choices=["random", "agree", "npz"], default="random",
                        help="random laws, agreeing peaked drafts, or saved inputs (--inputs)")
    parser.add_argument("--inputs", type=Path, default=None,
                        help="a .npz of one call's drafts, q, p (--mode npz; format above)")
    parser.add_argument("--in-loop", action="store_true",
                        help="time vmap(verifier) on a batch of one, as the decode loop runs it")
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
    if (args.mode == "npz") != (args.inputs is not None):
        parser.error("--inputs goes with --mode npz, and --mode npz needs --inputs")
    if args.tree_ms is not None and args.tree_ms <= 0:
        parser.error("--tree-ms must be > 0")
    names = args.verifiers or list_verifiers()
    unknown = sorted(set(names) - set(list_verifiers()))
    if unknown:
        parser.error(f"unknown verifiers {unknown}; allowed: {', '.join(list_verifiers())}")
    meta = inputs_meta(args.inputs) if args.mode == "npz" else None
    results = measure(names, args.K, args.L, V=args.vocab, calls=args.calls, warmup=args.warmup,
                      seed=args.seed, mode=args.mode, inputs=args.inputs, in_loop=args.in_loop,
                      temperature=meta["temperature"] if meta and args.in_loop else None)
    Ks, Ls, V = args.K, args.L, args.vocab
    setting = {"random": "random laws", "agree": "agreeing peaked drafts (T = 0.4)",
               "npz": f"inputs from {args.inputs}"}[args.mode]
    setting += ", on a batch of 1 as in the decode loop" if args.in_loop else ""
    if args.tree_ms is not None:
        tree_ms, source = args.tree_ms, "given with --tree-ms"
    elif (tree_ms := measured_tree_ms()) is not None:
        source = f"{TREE_MODEL} {TREE_PASS} measured by decode_speed ({DECODE_SPEED.name})"
    else:
        parser.error(f"no {DECODE_SPEED.name} to take the tree pass from; pass --tree-ms")
    if args.mode == "npz":
        drafts, q, _ = load_inputs(args.inputs)
        table = render_in_place(results, names, drafts.shape[1], drafts.shape[2],
                                tree_ms=tree_ms, tree_source=source, V=q.shape[-1],
                                calls=args.calls, inputs=args.inputs,
                                meta=meta, in_loop=args.in_loop)
    else:
        table = render(results, names, Ks, Ls, tree_ms=tree_ms, tree_source=source,
                       V=V, calls=args.calls, setting=setting)
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        command = " ".join(["python -m benchmarks.verify_cost",
                            *(sys.argv[1:] if argv is None else argv)])
        args.out.write_text(f"# Verifier cost at the Qwen2 vocabulary\n\nGenerated by "
                            f"`{command}`.\n\n{table}\n")


if __name__ == "__main__":
    main()
