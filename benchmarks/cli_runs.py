"""A table of CLI runs (``specjax-run`` with AR comparison), read from their ``results.jsonl``.

    python -m benchmarks.cli_runs --title "..." --command "specjax-run ..." \\
        --runs int8_lookup=runs/x/int8_lookup ... [--alone int8_lookup=int8_lookup_alone ...] \\
        --out paper_repro/results/cli_x.md

Each run is one ``specjax-run`` whose summary line holds the speed-up with its interval over
prompts and interleaved timing repeats (``specjax.compare``), the sign-flip p, prefill apart, and
(with ``breakdown=true``) the speculative step's parts. ``--alone A=B``: B ran A's first prompt
alone, and the table sets that prompt's time in A (beside longer prompts) against its time alone.
The runs are read as they were written: nothing is re-timed here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from omegaconf import OmegaConf

from benchmarks import write_report
from specjax.platform import hardware


def read_run(path: Path) -> tuple[dict, list[dict], dict]:
    rows = [json.loads(line) for line in (path / "results.jsonl").read_text().splitlines()
            if line.strip()]
    summary = next(r for r in rows if r.get("type") == "summary")
    return summary, [r for r in rows if r.get("type") != "summary"], OmegaConf.to_container(
        OmegaConf.load(path / "config.yaml"))


def setup(summary: dict, cfg: dict) -> str:
    m, d = summary["model"], summary["drafter"]
    rows = "int8 rows: " + ", ".join(f"{k.replace('_activations', '')}" for k in (
        "prefill_activations", "decode_activations") if m.get(k) == "int8") if m.get(
        "prefill_activations") == "int8" or m.get("decode_activations") == "int8" else ""
    drafter = f"{d['name']} L={d['L']}" + (f", {m['draft_weights']} draft"
                                           if m.get("draft") else "")
    return (f"{m['weights']} target{' (' + rows + ')' if rows else ''}; {drafter}; "
            f"T={cfg['sampling']['temperature']}; n={summary['speculative']['num_prompts']}; "
            f"{summary.get('timing_repeats', 1)} repeats")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", required=True, metavar="NAME=DIR")
    ap.add_argument("--alone", nargs="*", default=[], metavar="RUN=ALONE_RUN")
    ap.add_argument("--title", required=True)
    ap.add_argument("--command", required=True, help="the specjax-run line the runs share")
    ap.add_argument("--commit", required=True, help="the commit the runs were made at")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    runs = {}
    for item in args.runs:
        name, _, path = item.partition("=")
        runs[name] = read_run(Path(path))
    lines = [f"# {args.title}", "",
             f"`{args.command}` plus the overrides below, at commit {args.commit}, one run at a "
             f"time; this table is rendered by `python -m benchmarks.cli_runs` from the runs' "
             f"`results.jsonl`.", "", f"Machine: {hardware.describe()}.", "",
             "| run | setup | AR tok/s | SD tok/s | prefill per prompt AR / SD s | decode tok/s "
             "AR / SD | speed-up [interval] | decode-only speed-up [interval] | sign-flip p | BE "
             "| acceptance |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, (s, _, cfg) in runs.items():
        sd, ar = s["speculative"], s["autoregressive"]
        lo, hi = s["speedup_interval"]
        dlo, dhi = s["decode_speedup_interval"]
        lines.append(
            f"| {name} | {setup(s, cfg)} | {ar['tokens_per_s']:.1f} | {sd['tokens_per_s']:.1f} | "
            f"{ar['mean_prefill_s']:.2f} / {sd['mean_prefill_s']:.2f} | "
            f"{ar['decode_tokens_per_s']:.1f} / {sd['decode_tokens_per_s']:.1f} | "
            f"{s['speedup']:.2f}x [{lo:.2f}, {hi:.2f}] | {s['decode_speedup']:.2f}x "
            f"[{dlo:.2f}, {dhi:.2f}] | {s['speedup_sign_flip_p']:.3g} | "
            f"{sd['block_efficiency']:.2f} | {sd['acceptance_rate']:.3f} |")
    if args.alone:
        lines += ["", "A run's first prompt in the run (beside the other prompts, up to the "
                  "run's longest) against the same prompt run alone (wall seconds, compile "
                  "excluded, mean of the timing repeats):", "",
                  "| run | prompt | AR in the run | AR alone | ratio | SD in the run | SD alone "
                  "| ratio |", "|---|---|---|---|---|---|---|---|"]
        for item in args.alone:
            name, _, alone_name = item.partition("=")
            first, alone = runs[name][1][0], runs[alone_name][1][0]
            if first["id"] != alone["id"]:
                raise SystemExit(f"--alone {item}: the runs' first prompts differ "
                                 f"({first['id']} vs {alone['id']})")
            cells = []
            for kind in ("autoregressive", "speculative"):
                a, b = first[kind]["wall_time_s"], alone[kind]["wall_time_s"]
                cells += [f"{a:.2f}", f"{b:.2f}", f"{a / b:.3f}"]
            lines.append(f"| {name} | {first['id']} | " + " | ".join(cells) + " |")
    broken = [(n, s) for n, (s, _, _) in runs.items() if s["speculative"].get("time_breakdown")]
    if broken:
        lines += ["", "Step breakdown (`breakdown=true`: the speculative step's parts timed alone "
                  "at the run's shapes, and the step in the loop), against the AR step (1 / AR "
                  "decode tok/s):", "",
                  "| run | draft ms | tree ms | verify ms | standalone step ms | in-loop step ms "
                  "| AR step ms | in-loop step / AR step | BE |", "|" + "---|" * 9]
        for name, s in broken:
            b = s["speculative"]["time_breakdown"]
            ar_ms = 1e3 / s["autoregressive"]["decode_tokens_per_s"]
            lines.append(f"| {name} | {b['draft_ms']:.1f} | {b['tree_ms']:.1f} | "
                         f"{b['verify_ms']:.1f} | {b['step_ms']:.1f} | {b['in_loop_step_ms']:.1f} "
                         f"| {ar_ms:.1f} | {b['in_loop_step_ms'] / ar_ms:.2f} | "
                         f"{s['speculative']['block_efficiency']:.2f} |")
    write_report("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
