"""``specjax-run``: compose a config, check it, decode speculatively and autoregressively, record.

    specjax-run experiment=default                   # the README's main command
    specjax-run -m verifier=token,block,greedy_block # a sweep, one run dir per verifier

Thin on purpose: everything that decodes lives in ``specjax`` (``specjax.generate``); this file
only turns a Hydra config into calls and files. Order matters: validate (exit code 2, nothing
written) -> load -> generate AR and speculative on the same prompts and seed -> write
results.jsonl atomically -> print the table -> tracker. A run dir whose results.jsonl already has
a summary line is skipped, which makes an interrupted sweep resumable by rerunning it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from experiments.config_tree import config_dir
from experiments.validate import (
    ConfigError,
    check_config,
    check_group_overrides,
    check_models,
    check_pairing,
    verifier_name,
)
from specjax.eval.results import print_table, read_summary, write_results

EXIT_INVALID = 2


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _instantiate(cfg: DictConfig):
    """The cheap checks: config fields, then the objects they make (no model loaded yet)."""
    check_config(cfg)
    verifier = instantiate(cfg.verifier)
    # L=auto: a placeholder L until the probe has measured (``specjax.tuning.lookahead``).
    drafter = instantiate(cfg.drafter, **({"L": 1} if cfg.drafter.get("L") == "auto" else {}))
    sampling = instantiate(cfg.sampling)
    dataset = instantiate(cfg.dataset)
    check_pairing(cfg, drafter, verifier)
    return drafter, verifier, sampling, dataset


def _load(name: str, weights: str = "float32", activations: str = "float32",
          decode_activations: str = "float32"):
    import specjax

    return specjax.load_model(name, weights=weights, prefill_activations=activations,
                              decode_activations=decode_activations)


def weights_of(cfg: DictConfig) -> str:
    """``model.weights``, else the device's default (``specjax.registry.default_weights``:
    float32 on the CPU, bfloat16 on an accelerator); the toys are float32 tables."""
    from specjax.registry import PREFIXES, default_weights

    if cfg.model.get("weights"):
        return cfg.model.weights
    toy = any(str(cfg.model.target).startswith(p) for p in PREFIXES)
    return "float32" if toy else default_weights()


def draft_weights_of(cfg: DictConfig) -> str:
    """``model.draft_weights``, else the target's weights: any draft is exact, since the
    verifier sees the q it sampled from, so a cheaper int8 draft beside a float32 target changes
    only the speed."""
    return cfg.model.get("draft_weights") or weights_of(cfg)


def activations_of(cfg: DictConfig) -> tuple[str, str]:
    """(target, draft) ``prefill_activations``: the target's as set (float32 by default: its
    numerics are the output law); the draft's as set, else int8 where the draft has int8 weights
    and the VNNI kernel runs here, since a draft's numerics change only its acceptance."""
    from specjax.models import kernels

    target = cfg.model.get("prefill_activations") or "float32"
    draft = cfg.model.get("draft_prefill_activations")
    if draft is None:
        draft = "int8" if draft_weights_of(cfg) == "int8" and kernels.vnni() else "float32"
    return target, draft


def decode_activations_of(cfg: DictConfig) -> tuple[str, str]:
    """(target, draft) ``decode_activations``: as set, float32 by default (the target's
    numerics are the output law; a draft's would move its acceptance only)."""
    return (cfg.model.get("decode_activations") or "float32",
            cfg.model.get("draft_decode_activations") or "float32")


def _load_models(cfg: DictConfig, drafter):
    """Target, and the draft only for the draft-model drafter (shared when the names agree)."""
    from specjax.drafters import ModelDrafter

    needs_draft = isinstance(drafter, ModelDrafter)  # GreedyDrafter too
    try:
        activations, draft_activations = activations_of(cfg)
        decode, draft_decode = decode_activations_of(cfg)
        target = _load(cfg.model.target, weights_of(cfg), activations, decode)
    except ValueError as e:
        raise ConfigError("model.target", str(e)) from None
    draft = None
    draft_weights = draft_weights_of(cfg)
    if needs_draft and cfg.model.get("draft"):
        try:
            draft = (target if cfg.model.draft == cfg.model.target
                     and draft_weights == weights_of(cfg) and draft_activations == activations
                     and draft_decode == decode
                     else _load(cfg.model.draft, draft_weights, draft_activations, draft_decode))
        except ValueError as e:
            raise ConfigError("model.draft", str(e)) from None
    check_models(target, draft, needs_draft)
    return target, draft


def run_experiment(cfg: DictConfig, run_dir: str | Path,
                   console: Console | None = None) -> dict[str, Any]:
    """Run one config into ``run_dir``; return the summary (the stored one when resumed)."""
    import specjax
    from specjax.decode import parallel

    console = console or Console()
    run_dir = Path(run_dir)
    drafter, verifier, sampling, dataset = _instantiate(cfg)
    mesh = parallel.make_mesh(**{k: cfg.mesh[k] for k in ("data", "model")}) if cfg.get(
        "mesh") else None
    if cfg.resume and (done := read_summary(run_dir)) is not None:
        console.print(f"[bold]skipped[/]: {run_dir} already has a finished results.jsonl "
                      "(resume=false reruns it)")
        print_table(done, console)
        return done
    if cfg.get("compile_cache", True):
        from specjax.platform import compile_cache

        compile_cache.enable()
    target, draft = _load_models(cfg, drafter)
    prompts = dataset.load()
    texts = dataset.texts(target, prompts)
    drafter, auto = _lookahead(cfg, target, draft, drafter, verifier, sampling, texts)
    common = dict(sampling=sampling, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
                  batch_size=cfg.batch_size, mesh=mesh)
    fallback, measured = _fallback(cfg, target, draft, drafter, verifier, texts, common)
    spec_args = dict(draft=draft, drafter=drafter, verifier=verifier, fallback=fallback,
                     breakdown=bool(cfg.get("breakdown", False)), **common)
    comparison = None
    if cfg.ar_baseline:  # both modes timed call by call, interleaved (specjax.compare)
        comparison = specjax.compare(target, texts, repeats=int(cfg.get("timing_repeats", 1)),
                                     **spec_args)
        spec, ar = comparison.speculative, comparison.autoregressive
    else:
        spec, ar = specjax.generate(target, texts, **spec_args), None
    rows = _rows(prompts, texts, spec, ar)
    summary = _summary(cfg, run_dir, draft, drafter, verifier, spec, ar, auto, len(prompts))
    if comparison is not None:
        summary |= _interval(comparison)
    if fallback is not None:  # the rule the loop ran with, and what break_even=auto measured
        summary["fallback"] = {"break_even": fallback.break_even, "decay": fallback.decay,
                               "max_wait": fallback.max_wait, **({"auto": measured} if measured
                                                                else {})}
    if not parallel.is_main_process():  # every process holds the gathered results; process 0
        return summary  # records them
    _record(cfg, run_dir, rows, summary, spec, console)
    _track(cfg, run_dir, rows, summary, drafter)
    return summary


def _fallback(cfg: DictConfig, target, draft, drafter, verifier, texts, common):
    """(the loop's fallback rule or None to always speculate, what ``auto`` measured or None):
    ``specjax.decode.fallback``; ``break_even=auto`` times it here (``tuning.break_even``)."""
    fb = cfg.get("fallback")
    if fb is None or fb.get("break_even") is None:
        return None, None
    from specjax.decode.fallback import Fallback

    measured = None
    break_even = fb.break_even
    if break_even == "auto":
        from specjax.tuning.break_even import measure_break_even

        break_even, measured = measure_break_even(
            target, draft, drafter, texts, verifier=verifier, sampling=common["sampling"],
            seed=cfg.seed, mesh=common["mesh"])
    return Fallback(break_even=float(break_even), decay=float(fb.get("decay", 0.8)),
                    max_wait=int(fb.get("max_wait", 16))), measured


def _lookahead(cfg: DictConfig, target, draft, drafter, verifier, sampling, texts):
    """(drafter, what L=auto measured or None): ``drafter.L=auto`` fixes L from short probe
    runs on the first prompt (``specjax.tuning.lookahead``), before the measured runs."""
    if cfg.drafter.get("L") != "auto":
        return drafter, None
    import dataclasses

    from specjax.tuning.lookahead import choose_lookahead

    L, auto = choose_lookahead(target, draft, drafter, texts, verifier=verifier,
                               sampling=sampling, seed=cfg.seed)
    return dataclasses.replace(drafter, L=L), auto


def _interval(comparison) -> dict[str, Any]:
    """The speed-ups with their intervals (bootstrap over prompts and timing repeats) and the
    exact sign-flip p, as the summary records them."""
    return {"speedup": comparison.speedup[0], "speedup_interval": list(comparison.speedup[1:]),
            "decode_speedup": comparison.decode_speedup[0],
            "decode_speedup_interval": list(comparison.decode_speedup[1:]),
            "speedup_sign_flip_p": comparison.sign_flip_p,
            "timing_repeats": comparison.repeats}


def _rows(prompts, texts: list[str], spec, ar) -> list[dict]:
    """One results row per prompt: its text, the speculative output and counters, and the
    autoregressive ones beside them."""
    rows = []
    for i, prompt in enumerate(prompts):
        row = {"index": i, "id": prompt.id, "category": prompt.category, "prompt": texts[i],
               "output": spec.texts[i], "tokens": spec.tokens[i],
               "speculative": spec.per_prompt[i]}
        if ar is not None:
            row["autoregressive"] = {**ar.per_prompt[i], "output": ar.texts[i]}
        rows.append(row)
    return rows


def _summary(cfg: DictConfig, run_dir: Path, draft, drafter, verifier, spec, ar, auto,
             n_prompts: int) -> dict[str, Any]:
    """The run's summary line: models, drafter, verifier, both results, speedup, regime."""
    from specjax.eval.metrics import decode_speedup, regime, speedup

    activations, draft_activations = activations_of(cfg)
    decode, draft_decode = decode_activations_of(cfg)
    summary = {
        "run_name": cfg.run_name, "run_dir": str(run_dir),
        "model": {"target": cfg.model.target, "draft": cfg.model.draft if draft else None,
                  "weights": weights_of(cfg),
                  "draft_weights": draft_weights_of(cfg) if draft else None,
                  "prefill_activations": activations,
                  "draft_prefill_activations": draft_activations if draft else None,
                  "decode_activations": decode,
                  "draft_decode_activations": draft_decode if draft else None},
        "drafter": {"name": type(drafter).__module__.rsplit(".", 1)[-1],
                    **OmegaConf.to_container(cfg.drafter, resolve=True), "L": drafter.L,
                    **({"auto_lookahead": auto} if auto else {})},
        "verifier": verifier_name(verifier),
        "speculative": spec.summary,
        "autoregressive": None if ar is None else ar.summary,
        "speedup": None if ar is None else speedup(spec, ar),
        "decode_speedup": None if ar is None else decode_speedup(spec, ar),
        "regime": regime(cfg.batch_size, n_prompts),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    summary["drafter"].pop("_target_", None)
    return summary


def _record(cfg: DictConfig, run_dir: Path, rows: list[dict], summary: dict, spec,
            console: Console) -> None:
    """Write config.yaml and results.jsonl, then print the table (and the time breakdown).

    Written with the results, not before: a run refused by generate (a prompt over the context,
    non-finite logits) leaves no run directory behind."""
    run_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
    write_results(run_dir, rows, summary)
    print_table(summary, console)
    if "time_breakdown" in spec.summary:
        from specjax.decode.breakdown import format_breakdown

        console.print("time breakdown, " + format_breakdown(spec.summary["time_breakdown"]))


def _track(cfg: DictConfig, run_dir: Path, rows: list[dict], summary: dict, drafter) -> None:
    """Log the config, the per-prompt table and the summary to the configured tracker."""
    tracker = instantiate(cfg.logger)
    tracker.start(run_dir, name=f"{cfg.run_name}-{summary['verifier']}-"
                  f"{summary['drafter']['name']}-K{drafter.K}L{drafter.L}",
                  config=summary["config"])
    tracker.log_table("prompts", [_flatten({k: v for k, v in r.items() if k != "tokens"})
                                  for r in rows])
    tracker.log_summary(_flatten({k: v for k, v in summary.items() if k != "config"}))
    tracker.finish()


# An absolute path: relative ones resolve differently under `python -m` and the console script.
@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        from specjax.decode.parallel import initialize_distributed

        initialize_distributed()  # one process of many (SLURM / JAX_* env): join them first
        run_experiment(cfg, run_dir)
    except ValueError as e:  # ConfigError, or a ValueError naming the field from specjax
        if run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()  # Hydra made it for us; an invalid run leaves nothing behind
        print(f"specjax-run: error: {e}", file=sys.stderr)
        sys.exit(EXIT_INVALID)


def main() -> None:
    """Console script ``specjax-run``."""
    try:
        check_group_overrides(sys.argv[1:])
    except ConfigError as e:
        print(f"specjax-run: error: {e}", file=sys.stderr)
        sys.exit(EXIT_INVALID)
    _hydra_main()


if __name__ == "__main__":
    main()
