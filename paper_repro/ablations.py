"""Ablations of the SpecTr-GBV comparison over K, L and T.

    python -m paper_repro.ablations --preset cpu --which K   # BE and SR vs K in {1, 2, 3, 5, 7}
    python -m paper_repro.ablations --preset cpu --which L   # BE and SR vs L in {2, 4, 6, 8, 12}
    python -m paper_repro.ablations --preset cpu --which T   # BE vs T in {0.1, 0.4, 0.7}

Everything else is Table 1's setting (K = 3, L = 8, T = 0.4, the Qwen2.5-Coder pair) on HumanEval.
Rows:
- K: every multi-draft verifier (specinfer, spectr, spectr_gbv, multipath_block, traversal);
- L: SD (``token``) and GBV (``greedy_block``) with one draft, SpecTr, SpecTr-GBV and
  ``traversal`` (the best lossless multi-draft row of Table 1's landscape) with K = 3;
- T: all eight speculative rows of Table 1 (BE only: AR is not run, so no SR).
SR divides by one AR cell measured in the same session as the first swept value (AR does not
depend on K or L). Same prompts and per-prompt seeds in every cell; CIs are Table 1's paired
percentile bootstrap. Outputs ``<out>/ablation_<which>_<preset>.md`` / ``.png`` / ``.json``; the
cells in ``<out>/runs/ablation_<which>_<preset>/cells.jsonl`` (rerunning resumes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from paper_repro.cells import (  # noqa: E402
    MULTI_DRAFT,
    PAPER_NAMES,
    RESULTS,
    SINGLE_DRAFT,
    Method,
    Setting,
    run_cells,
    select,
    with_overrides,
)
from paper_repro.stats import (  # noqa: E402
    at_ceiling,
    be_stat,
    ceiling_stat,
    ci,
    estimate,
    gain_stat,
    lossless_verdict,
    one_machine,
    sr_stat,
)
from paper_repro.table1 import header  # noqa: E402

GRIDS = {"K": (1, 2, 3, 5, 7), "L": (2, 4, 6, 8, 12), "T": (0.1, 0.4, 0.7)}
BASE = dict(K=3, L=8, temperature=0.4, datasets=("humaneval",))
PRESETS: dict[str, Setting] = {
    "tiny": Setting(models="toy", n=8, max_new_tokens=24, batch_size=1, fast_compile=True,
                    repeats=2, **BASE),
    # Latency, as Table 1. 128 tokens: at 32 or 64, K = 5 and K = 7 made the same calls on
    # every prompt (the minimum-calls ceiling), so the K ablation could not tell them apart.
    "cpu": Setting(models="qwen-coder", n=8, max_new_tokens=128, batch_size=1, repeats=3,
                   **BASE),
    "full": Setting(models="qwen-coder", n=80, max_new_tokens=128, batch_size=1, repeats=3,
                    **BASE),
}
L_ROWS = (("token", 1), ("greedy_block", 1), ("spectr", None), ("spectr_gbv", None),
          ("traversal", None))


def methods_for(which: str, value, base: Setting) -> list[Method]:
    """The speculative rows swept at one value (K = None in L_ROWS means the base K)."""
    if which == "K":
        return [Method(v, value) for v in MULTI_DRAFT]
    if which == "L":
        return [Method(v, K or base.K) for v, K in L_ROWS]
    return [Method(v, 1) for v in SINGLE_DRAFT] + [Method(v, base.K) for v in MULTI_DRAFT]


def setting_at(which: str, value, base: Setting) -> Setting:
    return replace(base, **{{"K": "K", "L": "L", "T": "temperature"}[which]: value})


def measure(which: str, preset: str, base: Setting, values, names: str | None, out: Path,
            resume: bool, run: bool = True) -> dict:
    """{value: {(dataset, method): cell}}, AR (when SR is reported) under the key ``"ar"``.

    Each value is its own setting, so its cells are one ``run_cells`` call; the calls run once
    per repeat (AR, then every value, repeat 1; then repeat 2 ...), so that timing drift over
    the run falls on every value alike, as within one table."""
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    groups = [(base, [Method(None)])] if which != "T" else []
    groups += [(setting_at(which, v, base), select(methods_for(which, v, base), names))
               for v in values]
    for r in range(1, base.repeats + 1) if run else ():
        for s, methods in groups:
            run_cells("ablation", f"{which}_{preset}", s, methods, out, resume=resume,
                      log=log, repeats=r)
    cells = [run_cells("ablation", f"{which}_{preset}", s, methods, out, log=log,
                       measure=False)[0] for s, methods in groups]
    ar = cells.pop(0) if which != "T" else {}
    return {v: {**c, **ar} for v, c in zip(values, cells, strict=True)}


def summarize(which: str, base: Setting, by_value: dict) -> list[dict]:
    """One row per (method, value): BE and (K, L) SR with CIs."""
    d = base.datasets[0]
    out = []
    for v, cells in by_value.items():
        for (_, name), cell in cells.items():
            if name == "ar":
                continue
            row = dict(method=name, K=cell["K"], value=v,
                       lossless=lossless_verdict(name, cell["K"])[0],
                       BE=estimate(be_stat(cells, [d], name), cells, [d], name),
                       BE_ceiling=estimate(ceiling_stat(cells, [d], name), cells, [d], name),
                       at_ceiling=at_ceiling(cells, [d], name))
            if which != "T" and one_machine(cells, [d], name, "ar"):
                row["SR"] = estimate(sr_stat(cells, [d], name), cells, [d], name)
                # as in Table 1: a resumed cell's SR divides by an AR from another session
                row["other_session"] = cell["session"] != cells.get((d, "ar"), cell)["session"]
            out.append(row)
    return out


def paired_gains(which: str, base: Setting, by_value: dict) -> list[dict]:
    """BE at each swept value over BE at the first, paired (the same prompts and resamples).

    Once over all prompts, and once over the prompts that made more than the fewest target
    calls under both values: on a prompt at the ceiling under either value the token budget,
    not the method, decides the BE, so a tie there says nothing about the swept parameter."""
    d = base.datasets[0]
    first, *rest = by_value
    out = []
    for name in dict.fromkeys(n for (_, n) in by_value[first] if n != "ar"):
        a = by_value[first]
        for v in rest:
            b = by_value[v]
            if (d, name) not in b:
                continue
            free = [pa["target_calls"] > pa["min_calls"] and pb["target_calls"] > pb["min_calls"]
                    for pa, pb in zip(a[d, name]["prompts"], b[d, name]["prompts"], strict=True)]
            row = dict(method=name, value=v, base=first, n=len(free), n_below=sum(free),
                       all=estimate(gain_stat(be_stat(b, [d], name), be_stat(a, [d], name)),
                                    b, [d], name))
            if sum(free) >= 2:
                sa, sb = ({(d, name): dict(c[d, name], prompts=[p for p, f in zip(
                    c[d, name]["prompts"], free, strict=True) if f])} for c in (a, b))
                row["below"] = estimate(gain_stat(be_stat(sb, [d], name),
                                                  be_stat(sa, [d], name)), sb, [d], name)
            out.append(row)
    return out


def gains_lines(which: str, gains: list[dict]) -> list[str]:
    if not gains:
        return []
    lines = ["", f"Paired BE gain over {which} = {gains[0]['base']} (%, 95 % CI, the same "
             "prompts and resamples; significant only when the interval excludes 0):", "",
             "| method | value | all prompts | prompts below the ceiling under both |",
             "|---|---|---|---|"]
    for g in gains:
        below = (f"{ci(g['below'], 1, pct=True)} ({g['n_below']} of {g['n']})" if "below" in g
                 else f"— ({g['n_below']} of {g['n']} prompts)")
        lines.append(f"| {g['method']} | {which} = {g['value']} | {ci(g['all'], 1, pct=True)} "
                     f"({g['n']} prompts) | {below} |")
    return lines


def markdown_table(which: str, rows: list[dict], values) -> list[str]:
    label = {"K": "K (drafts)", "L": "L (draft length)", "T": "T (temperature)"}[which]
    names = list(dict.fromkeys(r["method"] for r in rows))
    lines = [f"| method | {' | '.join(f'{label.split()[0]} = {v}' for v in values)} |",
             "|---|" + "---|" * len(values)]
    for n in names:
        vals = []
        for v in values:
            r = next((r for r in rows if r["method"] == n and r["value"] == v), None)
            if r is None:
                vals.append("—")
                continue
            vals.append(f"BE {ci(r['BE'])}<br>ceiling {r['BE_ceiling'][0]:.2f}, "
                        f"{100 * r['at_ceiling']:.0f} % at it"
                        + (f"<br>SR {ci(r['SR'])}" if "SR" in r else
                           "<br>SR — ‡" if which != "T" else "")
                        + (" †" if r.get("other_session") else ""))
        shown = n + (f" ({PAPER_NAMES[n]})" if n in PAPER_NAMES else "")
        lines.append(f"| {shown} | " + " | ".join(vals) + " |")
    return lines


def figure(which: str, rows: list[dict], path: Path, title: str) -> None:
    metrics = ["BE"] + (["SR"] if which != "T" else [])
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for n in dict.fromkeys(r["method"] for r in rows):
            pts = sorted((r["value"], r[metric]) for r in rows if r["method"] == n
                         and metric in r)
            xs = [x for x, _ in pts]
            ys = [y[0] for _, y in pts]
            err = [[y[0] - y[1] for _, y in pts], [y[2] - y[0] for _, y in pts]]
            lossless = next(r["lossless"] for r in rows if r["method"] == n)
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, ls="-" if lossless else ":",
                        label=n if lossless else f"{n} (not lossless)")
        ax.set_xticks(sorted({r["value"] for r in rows}))
        ax.set_xlabel({"K": "K (drafts)", "L": "L (draft length)", "T": "temperature"}[which])
        ax.set_ylabel({"BE": "block efficiency", "SR": "speedup over AR"}[metric])
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m paper_repro.ablations",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--which", choices=sorted(GRIDS), required=True)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--methods", help="comma list of rows (default: all of the ablation's)")
    ap.add_argument("--values", help="comma list of swept values (default: " + "; ".join(
        f"{k} {','.join(map(str, v))}" for k, v in GRIDS.items()) + ")")
    ap.add_argument("--n", type=int)
    ap.add_argument("--max-new-tokens", type=int)
    ap.add_argument("--L", type=int, help="draft length of the K and T sweeps (default: Table 1's)")
    ap.add_argument("--batch-size", type=int, help="1 = latency (default), else throughput")
    ap.add_argument("--repeats", type=int, help="timings per cell, interleaved across methods")
    ap.add_argument("--render-only", action="store_true",
                    help="measure nothing: render the stored cells as they are")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    if args.repeats is not None and args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")
    if args.L is not None and (args.which == "L" or args.L < 1):
        raise SystemExit(f"--L must be >= 1 and only sets the K and T sweeps, got --L {args.L} "
                         f"with --which {args.which}")
    base = with_overrides(PRESETS[args.preset], n=args.n, max_new_tokens=args.max_new_tokens,
                          batch_size=args.batch_size, repeats=args.repeats, L=args.L)
    cast = float if args.which == "T" else int
    values = (tuple(cast(v) for v in args.values.split(",")) if args.values
              else GRIDS[args.which])
    by_value = measure(args.which, args.preset, base, values, args.methods, args.out,
                       args.resume, run=not args.render_only)
    rows = summarize(args.which, base, by_value)
    all_cells = {(v, *k): c for v, cells in by_value.items() for k, c in cells.items()}
    unique = {c["key"]: c for c in all_cells.values()}
    title = {"K": "BE and SR vs K (number of drafts)", "L": "BE and SR vs L (draft length)",
             "T": "BE vs temperature T"}[args.which]
    command = f"python -m paper_repro.ablations --preset {args.preset} --which {args.which}"
    command += "".join(f" {a}" for a in (sys.argv[1:] if argv is None else argv)
                       if a not in ("--preset", args.preset, "--which", args.which,
                                    "--render-only"))  # the command that measures these cells
    md = header(f"Ablation: {title}", command, base, unique, time.perf_counter() - start)
    fixed = {"K": "L = {L}, T = {T}", "L": "K = {K} for multi-draft rows, T = {T}",
             "T": "K = {K} for multi-draft rows, L = {L}"}[args.which]
    md += ["", f"Swept: {args.which} in {list(values)}; fixed: "
           + fixed.format(K=base.K, L=base.L, T=base.temperature)
           + " (the Setting line above shows the unswept values). "
           + ("SR: over one AR cell (AR does not depend on the swept value); a † marks a "
              "cell measured in another session than that AR cell (after a resume), a ‡ one "
              "timed on another machine (no SR). BE's ceiling: as in Table 1, the BE if every "
              "prompt had made the fewest target calls its tokens allow, and the share of "
              "prompts that did."
              if args.which != "T" else "BE only (no AR cells)."), ""]
    md += markdown_table(args.which, rows, values)
    gains = paired_gains(args.which, base, by_value)
    md += gains_lines(args.which, gains)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"ablation_{args.which}_{args.preset}"
    md += ["", f"![{title}]({stem.name}.png)"]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    figure(args.which, rows, stem.with_suffix(".png"),
           f"{title}: {base.models}, {base.n} prompts x {base.max_new_tokens} tokens "
           f"({args.preset})")
    result = dict(which=args.which, preset=args.preset, values=list(values), rows=rows,
                  gains=gains,
                  markdown=str(stem.with_suffix(".md")), figure=str(stem.with_suffix(".png")))
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"ablation {args.which}: {len(unique)} cells -> {stem}.md/.png "
          f"({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
