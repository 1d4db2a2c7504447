"""Real-model losslessness audit at T = 1: sampled speculative runs vs the target's exact law.

Why: the exact checker and the toy-model tests prove losslessness on tables with V <= 8. This
audit asks the same question of the whole stack on a real model: sample many speculative runs
of the first n = 2 generated tokens through ``specjax.generate`` and compare their empirical law
with the target's own law of those two tokens, computed from the model itself:

- first token: the full softmax of the target's logits after the prompt (T = 1);
- second token: the softmax after prompt + x1, for every first token x1 that is frequent enough
  to be tested on its own (expected count >= MIN_EXPECTED); the others are pooled.

Test: a G-test (likelihood ratio) per (drafter, verifier, K) over the pooled cells, summed over
the prompts (independent samples), with false-positive rate ALPHA per row. The TV column is the
TV between the empirical and exact laws over the same pooled cells: a noisy estimate that is
> 0 even for a lossless verifier (about sqrt(cells / n)).

Rows: every registered verifier at K in {1, 3} (single-draft verifiers at K = 1 only) with the
early-exit and prompt-lookup drafters; pairs refused by ``check_pairing`` are listed as refused;
a drafter that misreports q (reports q flattened halfway to uniform) must fail.

    python -m paper_repro.audit                       # SmolLM2-135M, 20,000 samples per row
    python -m paper_repro.audit --samples 2000 --verifiers token specinfer --out /tmp/a.md
"""

from __future__ import annotations

import argparse
import json
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

ALPHA = 1e-3  # false-positive rate of each row's test
MIN_EXPECTED = 5.0  # a pooled cell needs at least this expected count
PROMPTS = ("The capital of France is", "def fibonacci(n):", "Once upon a time, there")
RESULTS = Path(__file__).parent / "results" / "audit.md"


@dataclass(frozen=True)
class Fit:
    g: float
    df: int
    p_value: float
    tv: float
    unexpected: int  # samples the exact law gives probability 0

    def passes(self, alpha: float = ALPHA) -> bool:
        return self.unexpected == 0 and self.p_value >= alpha


def detectable_tv(samples: int, df: int, alpha: float = ALPHA, power: float = 0.8) -> float:
    """The smallest TV that a row's test detects with probability ``power``, for a diffuse bias.

    A G-test's statistic under an alternative is about noncentral chi-square with noncentrality
    n * chi2(alt || exact). The bias shape is an assumption: a diffuse one, every cell's
    probability scaled by 1 +- eps (half the mass each way), has chi2 = eps^2 and TV = eps / 2,
    so TV = sqrt(lambda / n) / 2 for the lambda that gives ``power`` at the row's critical value.
    A bias concentrated on rare cells is detected at a smaller TV; this is the TV that a
    verifier's bias spread over the whole law can hide below.
    """
    from scipy.optimize import brentq

    crit = stats.chi2.isf(alpha, df)
    lam = brentq(lambda lam: stats.ncx2.sf(crit, df, lam) - power, 1e-9, 1e6)
    return float(np.sqrt(lam / samples) / 2)


def softmax64(logits) -> np.ndarray:
    z = np.asarray(logits, np.float64)
    z = np.exp(z - z.max())
    return z / z.sum()


class ExactLaw:
    """The target's law of its first two generated tokens after one prompt (T = 1)."""

    def __init__(self, target, prompt: Sequence[int]):
        self.target, self.prompt = target, list(prompt)
        self._logits = jax.jit(target.model.logits)
        self.p1 = softmax64(self._logits(jnp.asarray(self.prompt, jnp.int32))[-1])
        self._p2: dict[int, np.ndarray] = {}
        self.eos = set(getattr(target, "eos_ids", ()) or ())

    def p2(self, x1: int) -> np.ndarray:
        if x1 not in self._p2:
            ids = jnp.asarray(self.prompt + [x1], jnp.int32)
            self._p2[x1] = softmax64(self._logits(ids)[-1])
        return self._p2[x1]


def g_test(counts: Counter, law: ExactLaw, n: int) -> tuple[float, int, float, int]:
    """(G, df, sum |O - E| / 2n, unexpected) over pooled cells for one prompt.

    Cells: (x1, x2) with E >= MIN_EXPECTED; per tested x1 the rest of its row pooled; all first
    tokens too rare to test pooled into one cell; an EOS first token ends the run (one cell)."""
    obs, exp = [], []
    first = Counter(seq[0] for seq in counts.elements())
    tested = [int(x) for x in np.flatnonzero(law.p1 * n >= MIN_EXPECTED) if int(x) not in law.eos]
    unexpected = sum(c for seq, c in counts.items() if law.p1[seq[0]] <= 0)
    for x1 in tested:
        row = law.p2(x1) * law.p1[x1] * n
        seen = Counter({seq[1]: c for seq, c in counts.items() if len(seq) > 1 and seq[0] == x1})
        unexpected += sum(c for x2, c in seen.items() if row[x2] <= 0)
        big = [int(x) for x in np.flatnonzero(row >= MIN_EXPECTED)]
        for x2 in big:
            obs.append(seen.get(x2, 0))
            exp.append(row[x2])
        rest_o = first[x1] - sum(seen.get(x2, 0) for x2 in big)
        rest_e = law.p1[x1] * n - sum(row[x2] for x2 in big)
        obs.append(rest_o)
        exp.append(rest_e)
    for x1 in sorted(law.eos):
        if law.p1[x1] * n >= MIN_EXPECTED:
            obs.append(first.get(x1, 0))
            exp.append(law.p1[x1] * n)
            tested.append(x1)
    obs.append(n - sum(first.get(x1, 0) for x1 in tested))
    exp.append(n - sum(law.p1[x1] * n for x1 in tested))
    o, e = np.asarray(obs, float), np.maximum(np.asarray(exp, float), 1e-300)
    keep = e >= MIN_EXPECTED * 1e-3  # drop cells that are empty by construction
    o, e = o[keep], e[keep]
    g = 2.0 * float(np.sum(np.where(o > 0, o * np.log(np.where(o > 0, o, 1.0) / e), 0.0)))
    return g, len(o) - 1, 0.5 * float(np.abs(o - e).sum()) / n, unexpected


def sample_pairs(target, drafter, verifier, prompt, n: int, seed: int, batch: int
                 ) -> tuple[Counter, list[float]]:
    """Counts of the first two tokens over n speculative runs (one row per run), and the run's
    acceptance per draft position (accepted over drafted, pooled over its steps)."""
    import specjax
    from specjax.models.sampling import Sampling

    rows_per_call = -(-n // -(-n // batch))  # equal batches: no call pays for padding rows
    res = specjax.generate(target, [list(prompt)] * n, drafter=drafter, verifier=verifier,
                           sampling=Sampling(temperature=1.0), max_new_tokens=2, seed=seed,
                           batch_size=rows_per_call, progress=False, shared_prompt=True)
    return (Counter(tuple(t) for t in res.tokens),
            [float(a) for a in res.summary.get("per_position_acceptance", [])])


def misreporting(drafter_cls: type) -> type:
    """A drafter that samples from q but reports q flattened halfway to uniform (must fail)."""
    import dataclasses

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Misreporting(drafter_cls):
        def propose(self, model, key, state, history, n, *, sampling, vocab_size, scratch):
            drafts, q, state = super().propose(model, key, state, history, n, sampling=sampling,
                                               vocab_size=vocab_size, scratch=scratch)
            return drafts, 0.5 * q + 0.5 / vocab_size, state

    Misreporting.__name__ = f"Misreporting{drafter_cls.__name__}"
    return Misreporting


MUTANT_ROWS = (("token", 1), ("specinfer", 3))
# A declared-lossy verifier whose bias needs high acceptance to show: drafted by the target
# itself (the early-exit drafter at every layer, so q = p up to float rounding). At q = p and
# K = 3, L = 2 the exact checker puts the two-token TV of spectr_gbv at 0.06-0.10 on peaked
# small laws (and 0 on a flat one), above the ~0.034 that 20,000 samples detect 4 times in 5.
# The lossless specinfer on the same drafts is the control: if it failed too, the self-drafter,
# not the verifier, would be what the row measures.
SELF_ROWS = (("spectr_gbv", 3), ("specinfer", 3))
SELF = "target as drafter (q = p)"


def rows(verifiers: Sequence[str], drafters: Sequence[str], Ks: Sequence[int], *, L: int,
         exit_layers: int, mutant_rows=MUTANT_ROWS, self_rows=(), target_layers: int = 0,
         largest_k_only: bool = False):
    """(label, drafter or None, verifier name, K, refusal reason or None) for every row.

    Ordered so that a run stopped early (the full audit takes hours on a CPU) has the rows that
    matter most: first the misreporting drafter's first row (an audit that cannot fail it is
    worth nothing), then the self-drafted rows (``self_rows``, drafted by all ``target_layers``
    layers) of verifiers asked for, each verifier at its largest K with the first drafter, the
    other misreporting rows, each verifier at its largest K with the other drafters, the
    smaller K."""
    from algorithms.verifiers import check_pairing, get_verifier
    from specjax.drafters import EarlyExitDrafter, NgramDrafter

    def make(kind, K):
        if kind == "early_exit":
            return EarlyExitDrafter(K=K, L=L, num_layers=exit_layers)
        return NgramDrafter(K=K, L=L)

    def row(kind, name, K):
        d = make(kind, K)
        try:
            check_pairing(get_verifier(name), d.draft_structure, K, drafter_name=type(d).__name__)
            return kind, d, name, K, None
        except ValueError as e:
            return kind, None, name, K, str(e)

    def ks(name):  # largest first
        top = get_verifier(name).max_drafts
        return sorted((K for K in Ks if top is None or K <= top), reverse=True)

    largest = [(kind, name, ks(name)[0]) for kind in drafters for name in verifiers if ks(name)]
    rest = [(kind, name, K) for kind in drafters for name in verifiers for K in ks(name)[1:]
            if not largest_k_only]
    def mutants(selected):
        for name, K in selected:
            bad = misreporting(EarlyExitDrafter)(K=K, L=L, num_layers=exit_layers)
            yield "early_exit, misreports q", bad, name, K, None

    yield from mutants(mutant_rows[:1])
    for name, K in self_rows:
        if name in verifiers:
            yield SELF, EarlyExitDrafter(K=K, L=L, num_layers=target_layers), name, K, None
    yield from (row(*r) for r in largest if r[0] == drafters[0])
    yield from mutants(mutant_rows[1:])
    yield from (row(*r) for r in largest if r[0] != drafters[0])
    yield from (row(*r) for r in rest)


def row_seed(seed: int, kind: str, name: str, K: int) -> int:
    """A row's seed from its identity, so a subset or a resumed run draws the same samples."""
    return seed + 10 * (zlib.crc32(f"{kind}|{name}|{K}".encode()) % 10_000_000)


def audit(target, prompts: Sequence[Sequence[int]], *, verifiers, drafters=("early_exit", "ngram"),
          Ks=(1, 3), L: int = 2, samples: int = 20_000, exit_layers: int = 1, batch: int = 2000,
          seed: int = 0, mutant_rows=MUTANT_ROWS, self_rows=SELF_ROWS, log=print, on_row=None,
          store=None, measure: bool = True, largest_k_only: bool = False) -> list[dict]:
    """One dict per row: drafter, verifier, K, and the pooled G-test over the prompts.

    ``store`` (a ``paper_repro.cells.CellStore``) keeps each finished row under a key of its
    whole setting, and a row already stored is reused: a killed audit resumes. With
    ``measure=False`` it measures nothing: rows not stored are left out, listed as pending
    (``on_row`` still gets the table). ``largest_k_only``: each verifier at its largest K only.
    Each measured row keeps its acceptance per draft position (mean over the prompts): a row
    whose drafts are rarely accepted tests little of what sets its verifier apart."""
    from algorithms.verifiers import get_verifier
    from paper_repro.cells import SESSION

    laws = [ExactLaw(target, p) for p in prompts]
    per_prompt = -(-samples // len(prompts))  # at least ``samples`` in all
    plan = list(rows(verifiers, drafters, Ks, L=L, exit_layers=exit_layers,
                     mutant_rows=mutant_rows, self_rows=self_rows,
                     target_layers=target.model.config.num_layers, largest_k_only=largest_k_only))
    out = []

    def pending() -> list[str]:  # the plan's rows not in ``out``
        done = {(r["drafter"], r["verifier"], r["K"]) for r in out}
        return [f"{k} / {n} / K = {K}" for k, _, n, K, _ in plan if (k, n, K) not in done]

    for kind, drafter, name, K, refused in plan:
        row = dict(drafter=kind, verifier=name, K=K, lossless=get_verifier(name).lossless)
        if refused:
            out.append(row | dict(refused=refused))
            log(f"{kind:>26} {name:<16} K={K}: refused")
            continue
        key = json.dumps(dict(model=getattr(target, "name", "?"), prompts=[list(map(int, p))
                              for p in prompts], drafter=kind, verifier=name, K=K, L=L,
                              exit_layers=exit_layers, per_prompt=per_prompt, seed=seed),
                         sort_keys=True)
        stored = store.get(key) if store is not None else None
        if stored is not None:
            out.append(row | dict(samples=stored["samples"], fit=Fit(**stored["fit"]),
                                  seconds=stored["seconds"], resumed=True,
                                  acceptance=stored.get("acceptance")))
            log(f"{kind:>26} {name:<16} K={K}: stored (resumed)")
            continue
        if not measure:  # the table of what is stored; the rest is listed as pending
            continue
        t0 = time.perf_counter()
        g = df = tv = unexpected = 0
        accepted = []
        for j, (prompt, law) in enumerate(zip(prompts, laws, strict=True)):
            counts, acc = sample_pairs(target, drafter, name, prompt, per_prompt,
                                       seed=row_seed(seed, kind, name, K) + j, batch=batch)
            accepted.append(acc)
            gj, dfj, tvj, uj = g_test(counts, law, per_prompt)
            g, df, tv, unexpected = g + gj, df + dfj, tv + tvj / len(prompts), unexpected + uj
        fit = Fit(g, df, float(stats.chi2.sf(g, df)) if df > 0 else 1.0, tv, unexpected)
        acceptance = [float(np.mean(a)) for a in zip(*accepted, strict=True)]
        out.append(row | dict(samples=per_prompt * len(prompts), fit=fit,
                              seconds=time.perf_counter() - t0, acceptance=acceptance))
        if store is not None:
            store.put(dict(key=key, session=SESSION, samples=out[-1]["samples"],
                           fit=asdict(fit), seconds=out[-1]["seconds"], acceptance=acceptance))
        log(f"{kind:>26} {name:<16} K={K}: G={fit.g:.1f} df={fit.df} p={fit.p_value:.3g} "
            f"TV~{fit.tv:.4f} unexpected={fit.unexpected} ({out[-1]['seconds']:.0f} s)")
        if on_row is not None:  # e.g. rewrite the results file, so a long run keeps its rows
            on_row(out, pending())
    if not measure and on_row is not None:  # the stored rows, the rest listed as pending
        on_row(out, pending())
    return out


def render(results: list[dict], *, model: str, prompts: Sequence[str], command: str,
           note: str = "", pending: Sequence[str] = ()) -> str:
    lines = [
        f"# Real-model losslessness audit: {model}, T = 1, first 2 generated tokens",
        "",
        f"Command: `{command}`",
        "",
        f"Prompts: {', '.join(repr(p) for p in prompts)}. G-test per row summed over the prompts "
        f"(cells with expected count >= {MIN_EXPECTED:g}, the rest pooled), false-positive "
        f"rate {ALPHA:g} per row. TV is estimated over the same pooled cells (sampling noise "
        "alone makes it > 0). A lossless verifier should pass; the misreporting drafter must "
        "fail; a declared-lossy verifier's row (claims lossless: no) says only whether its "
        "samples resolve its bias at this setting. *TV at 80 % power*: the smallest TV this "
        "row's test detects 4 times in 5 for a diffuse bias (every cell scaled by 1 +- eps; "
        "`detectable_tv`): a bias spread that thin and smaller passes unseen, one on rare cells "
        "shows at a smaller TV. *P(accept) by position*: accepted over drafted at each draft "
        "position, pooled over the run's steps, mean over the prompts. *... in accepted "
        "branches*: that TV over P(accept) at position 1, the smallest bias a test of this row "
        "detects 4 times in 5 when the bias lies only in the runs where a draft token was "
        "accepted (the branches where block, greedy_block, multipath_block, traversal and "
        "ordered_rrs differ from token SD): a row whose drafts are rarely accepted tests them "
        "weakly.",
        "",
        "Earlier reduced runs (1,000-4,000 samples per row, every lossless verifier, and the "
        "same audit on the tiny random decoder) are in `audit_reduced.md`.",
        "",
    ]
    if note:
        lines += [note, ""]
    lines += ["| drafter | verifier | K | claims lossless | samples | G | df | p-value | TV est. "
              "| TV at 80 % power | P(accept) by position | TV at 80 % power in accepted branches "
              "| verdict | s |", "|---" * 14 + "|"]
    for r in results:
        head = f"| {r['drafter']} | {r['verifier']} | {r['K']} | {'yes' if r['lossless'] else 'no'}"
        if "refused" in r:
            lines.append(f"{head} | – | – | – | – | – | – | – | – | refused before compiling | – |")
            continue
        f = r["fit"]
        if r["lossless"]:
            verdict = "pass" if f.passes() else "FAIL"
        else:  # a declared-lossy verifier: the question is only whether its bias shows here
            verdict = "bias not resolved" if f.passes() else "bias detected"
        if f.unexpected:
            verdict += f" ({f.unexpected} impossible samples)"
        power = detectable_tv(r["samples"], f.df)
        acc = r.get("acceptance") or []
        shown = " / ".join(f"{a:.3f}" for a in acc) if acc else "–"
        inside = f"{power / acc[0]:.3f}" if acc and acc[0] > 0 else "–"
        lines.append(f"{head} | {r['samples']} | {f.g:.1f} | {f.df} | {f.p_value:.3g} | "
                     f"{f.tv:.4f} | {power:.4f} | {shown} | {inside} | {verdict} | "
                     f"{r['seconds']:.0f} |")
    if pending:
        lines += ["", f"Not measured yet ({len(pending)} rows; rerun the command to resume): "
                  + "; ".join(pending) + "."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    import shlex
    import sys

    from algorithms.verifiers import list_verifiers

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--samples", type=int, default=20_000, help="per row, over all prompts")
    parser.add_argument("--verifiers", nargs="+", default=None)
    parser.add_argument("--drafters", nargs="*", default=["early_exit", "ngram"],
                        choices=["early_exit", "ngram"])
    parser.add_argument("--K", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--L", type=int, default=2)
    parser.add_argument("--exit-layers", type=int, default=6)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--mutant-rows", nargs="*", default=[f"{n}:{k}" for n, k in MUTANT_ROWS],
                        help="verifier:K rows run with the misreporting drafter (none: no rows)")
    parser.add_argument("--prompts", type=int, default=len(PROMPTS), choices=range(1, 4),
                        help="use the first N of the built-in prompts")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--note", default="")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--largest-k-only", action="store_true",
                        help="each verifier at its largest K in --K only")
    parser.add_argument("--no-self-rows", dest="self_rows", action="store_false",
                        help="leave out the rows drafted by the target itself (q = p)")
    parser.add_argument("--stored-only", action="store_true",
                        help="rewrite the table from the stored rows; measure nothing")
    parser.add_argument("--no-resume", dest="resume", action="store_false",
                        help="measure every row again (stored rows of earlier runs are ignored)")
    args = parser.parse_args(argv)
    names = args.verifiers or list_verifiers()
    unknown = sorted(set(names) - set(list_verifiers()))
    if unknown:
        parser.error(f"unknown verifiers {unknown}; allowed: {', '.join(list_verifiers())}")
    if args.samples < 1 or args.batch < 1:
        parser.error("--samples and --batch must be >= 1")
    if args.stored_only and not args.resume:
        parser.error("--stored-only needs the stored rows: drop --no-resume")
    try:
        mutant_rows = [(r.split(":")[0], int(r.split(":")[1])) for r in args.mutant_rows]
    except (IndexError, ValueError):
        parser.error(f"--mutant-rows: each must be verifier:K, got {args.mutant_rows}")
    import specjax

    target = specjax.load_model(args.model)
    prompts = [list(target.encode(p)) for p in PROMPTS]
    prompts = prompts[:args.prompts]
    argv_shown = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--stored-only"]
    command = "python -m paper_repro.audit " + " ".join(shlex.quote(a) for a in argv_shown)
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def write(results, pending=()):
        args.out.write_text(render(results, model=args.model, prompts=PROMPTS[:args.prompts],
                                   command=command, note=args.note, pending=pending))

    from paper_repro.cells import CellStore

    # Finished rows, one JSON line each, next to the table: a killed audit resumes from them.
    store = CellStore(args.out.parent / "runs" / f"{args.out.stem}_rows.jsonl",
                      resume=args.resume)
    results = audit(target, prompts, verifiers=names, drafters=args.drafters, Ks=args.K,
                    L=args.L, samples=args.samples, exit_layers=args.exit_layers,
                    batch=args.batch, seed=args.seed, mutant_rows=mutant_rows,
                    on_row=write, store=store, measure=not args.stored_only,
                    self_rows=SELF_ROWS if args.self_rows else (),
                    largest_k_only=args.largest_k_only)
    if not args.stored_only:  # (stored-only: on_row already wrote it, with the pending rows)
        write(results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
