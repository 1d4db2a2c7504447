"""Dump real verifier inputs, (drafts, q, p) per step, from a speculative decode of real prompts.

    python -m benchmarks.dump_verify_inputs                       # Qwen pair, HumanEval, K=3 L=8
    python -m benchmarks.dump_verify_inputs --models toy --n 2    # the toy pair, seconds

Why: ``benchmarks.verify_cost`` on random laws times verifiers on inputs the decode loop never
hands them (issue 44: SpecTr cost 6.6 ms on random laws and ~96 ms per step in Table 1, because
real code drafts agree over whole blocks). This decodes the first ``--n`` prompts of a suite one
by one (batch 1, the latency setting) with the model drafter and ``--verifier`` wrapped in
``specjax.eval.recorder.InputRecorder``, keeps the first ``--calls`` verifier calls, and writes
them stacked into one ``.npz`` (``drafts`` [N, K, L] int32, ``q`` [N, K, L, V] float32, ``p``
[N, K, L+1, V] float32: the verifier's own arguments after the sampling transform), which
``python -m benchmarks.verify_cost --mode npz --inputs F`` times every verifier on.

The trajectory (and so the recorded prefixes) depends on the verifier that decodes; any
lossless one gives prefixes of the target's own law. The default, ``traversal``, is lossless.
The file is derived data (hundreds of MB at V = 151,936): it is written outside the repository
by default and never committed; the command regenerates it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks import command_line

DEFAULT_OUT = Path.home() / ".cache" / "specjax" / "verify_inputs"


def dump(models: str, dataset: str, n: int, *, K: int, L: int, temperature: float, calls: int,
         max_new_tokens: int, verifier: str, seed: int = 0) -> tuple[tuple, dict]:
    """((drafts, q, p) stacked over the recorded calls, a provenance dict)."""
    import specjax
    from algorithms.verifiers import get_verifier
    from specjax.drafters import ModelDrafter
    from specjax.eval.recorder import InputRecorder, InputSink
    from specjax.platform import hardware, provenance
    from specjax.prompts import PromptSuite, load_prompts

    target_name, draft_name, target, draft = _pair(models)
    if models == "toy":  # the toy pair reads no text: its own token-id suite stands in
        dataset, texts = "toy", [p.text for p in load_prompts("toy")[:n]]
    else:
        suite = PromptSuite(suite=dataset, n=n, shuffle=False, chat=True)
        texts = suite.texts(target, suite.load())
    sink = InputSink(limit=calls)
    start = time.perf_counter()
    for i, text in enumerate(texts):  # one prompt per call: batch 1, as the latency loop runs
        if sink.full:
            break
        specjax.generate(target, [text], draft=draft, drafter=ModelDrafter(K=K, L=L),
                         verifier=InputRecorder(get_verifier(verifier), sink),
                         sampling=specjax.Sampling(temperature=temperature),
                         max_new_tokens=max_new_tokens, seed=seed + i, progress=False)
    meta = dict(models=models, target=target_name, draft=draft_name, dataset=dataset,
                prompts_used=i + 1, K=K, L=L, temperature=temperature, verifier=verifier,
                calls=len(sink.calls), max_new_tokens=max_new_tokens, seed=seed,
                commit=provenance.commit(), hardware=hardware.describe(),
                seconds=round(time.perf_counter() - start, 1))
    return sink.stacked(), meta


def _pair(models: str):
    from omegaconf import OmegaConf

    from experiments.config_tree import config_dir  # the model pairs specjax-run knows

    cfg = OmegaConf.load(config_dir() / "model" / f"{models}.yaml")
    names = str(cfg.target), str(cfg.draft)
    if models == "toy":
        from specjax.models.toy import load_toy

        return (*names, load_toy(names[0]), load_toy(names[1]))
    from specjax import load_model

    return (*names, load_model(names[0]), load_model(names[1]))


def save(path: Path, arrays: tuple, meta: dict) -> None:
    drafts, q, p = arrays
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, drafts=drafts, q=q, p=p, meta=json.dumps(meta))


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen-coder", help="configs/model/<models>.yaml")
    ap.add_argument("--dataset", default="humaneval")
    ap.add_argument("--n", type=int, default=4, help="prompts at most (stops at --calls)")
    ap.add_argument("--calls", type=int, default=16, help="verifier calls to keep")
    ap.add_argument("--K", type=int, default=3)
    ap.add_argument("--L", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--verifier", default="traversal", help="the lossless verifier that decodes")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"default: {DEFAULT_OUT}/<models>_<dataset>_K<K>_L<L>.npz")
    args = ap.parse_args(argv)
    for name in ("n", "calls", "K", "L", "max_new_tokens"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.temperature <= 0:
        ap.error(f"--temperature must be > 0 (q and p are sampling laws), got {args.temperature}")
    from algorithms.verifiers import list_verifiers

    if args.verifier not in list_verifiers():
        ap.error(f"--verifier: unknown {args.verifier!r}; allowed: {', '.join(list_verifiers())}")
    dataset = "toy" if args.models == "toy" else args.dataset
    out = args.out or DEFAULT_OUT / f"{args.models}_{dataset}_K{args.K}_L{args.L}.npz"
    arrays, meta = dump(args.models, args.dataset, args.n, K=args.K, L=args.L,
                        temperature=args.temperature, calls=args.calls,
                        max_new_tokens=args.max_new_tokens, verifier=args.verifier)
    meta["command"] = command_line("benchmarks.dump_verify_inputs")
    save(out, arrays, meta)
    print(f"{meta['calls']} verifier calls from {meta['prompts_used']} prompt(s) "
          f"({meta['seconds']} s) -> {out}")
    return out


if __name__ == "__main__":
    main()
