"""The training loop behind ``specjax-train``: optax AdamW, jitted step, eval, orbax, trackers.

Optimizer: global-norm gradient clipping, then AdamW (Loshchilov & Hutter 2019) on a linear
warmup + cosine decay schedule (``optax.warmup_cosine_decay_schedule``) down to
``min_lr_ratio`` × the peak. The train step (loss, gradients, update) is one ``jax.jit``; the
frozen target's weights are an argument, not a constant, so nothing large is baked into the
executable. Eval is the same loss on fixed held-out windows (plus α for the family).

Checkpoints: every ``save_every`` steps and at the end, orbax (``checkpoints``) writes the
trainable parameters and the optimizer state; rerunning the same config resumes from the
latest complete one, and because a batch depends only on (seed, step), the resumed run is the
run that was never interrupted (the tests check parameters and optimizer state bit for bit).
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from specjax.drafters import runs
from specjax.drafters.trained import target_decoder
from specjax.registry import load_model
from specjax.training import checkpoints
from specjax.training.tasks import KINDS, batch_loss, make_trainable


def load_target(name: str):
    """``specjax.load_model(name)`` of a decoder (``tiny-llama`` / ``tiny-qwen2`` for tests and
    smoke runs); the tabular toys have no hidden states to train on."""
    if name.startswith("toy"):
        raise ValueError(f"target: {name!r} is a tabular toy model without hidden states; use a "
                         "decoder (smollm2-135m-instruct, qwen2.5-coder-1.5b-instruct, tiny-llama)")
    return load_model(name)


def _field(cfg: dict, path: str):
    node = cfg
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"{path}: missing from the config")
        node = node[part]
    return node


def _int(cfg, path, low):
    v = _field(cfg, path)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{path}: must be an integer >= {low}, got {v!r}")
    return v


def _num(cfg, path, low, high=None, *, open_low=False):
    v = _field(cfg, path)
    bad = isinstance(v, bool) or not isinstance(v, (int, float))
    bad = bad or (v <= low if open_low else v < low) or (high is not None and v > high)
    if bad:
        rng = f"{'(' if open_low else '['}{low}, {high if high is not None else 'inf'}]"
        raise ValueError(f"{path}: must be a number in {rng}, got {v!r}")
    return v


def check_config(cfg: dict) -> None:
    """One ValueError ``field: message`` for the first bad value (the app exits 2 on it)."""
    from specjax.training.data import EVAL_SUITES, TEXT_SOURCES

    kind = _field(cfg, "kind")
    if kind not in KINDS:
        raise ValueError(f"kind: unknown drafter kind {kind!r}; allowed: {', '.join(KINDS)}")
    for path, low in (("steps", 1), ("batch_size", 1), ("seq_len", 4), ("seed", 0),
                      ("eval_every", 1), ("eval_batches", 1), ("save_every", 1), ("keep", 1),
                      ("log_every", 1), ("optim.warmup_steps", 0), ("data.distill_prompts", 0),
                      ("data.distill_new_tokens", 1), ("data.distill_batch", 1)):
        _int(cfg, path, low)
    _num(cfg, "optim.lr", 0, open_low=True)
    _num(cfg, "optim.min_lr_ratio", 0, 1)
    _num(cfg, "optim.weight_decay", 0)
    _num(cfg, "optim.b1", 0, 1)
    _num(cfg, "optim.b2", 0, 1)
    _num(cfg, "optim.clip", 0, open_low=True)
    _num(cfg, "data.eval_fraction", 0, 0.5, open_low=True)
    _num(cfg, "data.distill_temperature", 0)
    if cfg["data"].get("max_tokens") is not None:
        _int(cfg, "data.max_tokens", 2 * cfg["seq_len"] + 2)
    for s in cfg["data"].get("sources") or []:
        if s not in TEXT_SOURCES:
            raise ValueError(f"data.sources: unknown source {s!r}; allowed: "
                             f"{', '.join(TEXT_SOURCES)} (evaluation suites "
                             f"{', '.join(EVAL_SUITES)} are never training text)")
    if not cfg["data"].get("sources") and not cfg["data"].get("distill_prompts"):
        raise ValueError("data.sources: empty and data.distill_prompts is 0: no training text")
    for name in (cfg["data"].get("weights") or {}):
        _num(cfg, f"data.weights.{name}", 0)
    module = cfg.get("module") or {}
    allowed = {"eagle": set(), "medusa": {"num_heads"}, "family": {"hidden_size", "num_layers"}}
    extra = set(module) - allowed[kind]
    if extra:
        raise ValueError(f"module.{sorted(extra)[0]}: not an option of kind={kind}; allowed: "
                         f"{sorted(allowed[kind]) or 'none'}")
    if kind == "medusa":
        _int(cfg, "module.num_heads", 1)
        if cfg["seq_len"] < module["num_heads"] + 2:
            raise ValueError(f"seq_len: must be >= module.num_heads + 2 = "
                             f"{module['num_heads'] + 2}, got {cfg['seq_len']}")
    if kind == "family":
        _int(cfg, "module.num_layers", 1)
        d = _int(cfg, "module.hidden_size", 32)
        if d % 32:
            raise ValueError(f"module.hidden_size: must be a multiple of 32, got {d}")
    loss = cfg.get("loss") or {}
    if kind == "eagle":
        extra = set(loss) - {"feature_weight", "unroll"}
        if extra:
            raise ValueError(f"loss.{sorted(extra)[0]}: not an option of kind=eagle; allowed: "
                             "feature_weight, unroll")
        if "unroll" in loss and loss["unroll"] not in (1, 2):
            raise ValueError(f"loss.unroll: must be 1 or 2, got {loss['unroll']!r}")
        if "feature_weight" in loss:
            _num(cfg, "loss.feature_weight", 0)
    elif loss:
        raise ValueError(f"loss.{sorted(loss)[0]}: kind={kind} has no loss options")


def make_optimizer(optim: dict, steps: int):
    warmup = min(int(optim["warmup_steps"]), max(steps - 1, 0))
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=float(optim["lr"]), warmup_steps=warmup,
        decay_steps=max(steps, warmup + 1), end_value=float(optim["lr"]) * optim["min_lr_ratio"])
    tx = optax.chain(optax.clip_by_global_norm(float(optim["clip"])),
                     optax.adamw(schedule, b1=optim["b1"], b2=optim["b2"],
                                 weight_decay=optim["weight_decay"]))
    return tx, schedule


class Trainer:
    """The trainable module, its optimizer and the jitted step / eval for one config."""

    def __init__(self, cfg: dict, target):
        self.cfg = cfg
        self.kind = cfg["kind"]
        self.target = target_decoder(target, "specjax-train")
        module = make_trainable(self.kind, self.target.config, seed=cfg["seed"],
                                **(cfg.get("module") or {}))
        self.graph, self.params = nnx.split(module)
        self.tgraph, self.tstate = nnx.split(self.target)
        self.tx, self.schedule = make_optimizer(cfg["optim"], cfg["steps"])
        self.opt_state = self.tx.init(self.params)
        options = dict(cfg.get("loss") or {})

        def loss_of(params, tstate, tokens, eval_mode=False):
            model = nnx.merge(self.graph, params)
            target = nnx.merge(self.tgraph, tstate)
            return batch_loss(self.kind, options, model, target, tokens, eval_mode=eval_mode)

        def step(params, opt_state, tstate, tokens):
            (loss, metrics), grads = jax.value_and_grad(loss_of, has_aux=True)(
                params, tstate, tokens)
            updates, opt_state = self.tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, {
                **metrics, "loss": loss, "grad_norm": optax.tree.norm(grads)}

        self.step = jax.jit(step, donate_argnums=(0, 1))
        self.evaluate_one = jax.jit(lambda p, t, x: loss_of(p, t, x, eval_mode=True))

    def train_step(self, tokens: np.ndarray) -> dict[str, float]:
        self.params, self.opt_state, metrics = self.step(self.params, self.opt_state,
                                                         self.tstate, jnp.asarray(tokens))
        return metrics

    def evaluate(self, batches: list[np.ndarray]) -> dict[str, float]:
        outs = [self.evaluate_one(self.params, self.tstate, jnp.asarray(b)) for b in batches]
        metrics = [{"loss": float(loss), **{k: float(v) for k, v in m.items()}}
                   for loss, m in outs]
        return {k: float(np.mean([m[k] for m in metrics])) for k in metrics[0]}

    def module(self) -> nnx.Module:
        return nnx.merge(self.graph, self.params)


def train(cfg: dict[str, Any], *, target=None, tracker=None, corpus=None,
          stop_after: int | None = None) -> dict[str, Any]:
    """Train (or resume) the run of ``cfg``; returns ``final.json``'s content (or, with
    ``stop_after``, the state after that step: the tests' stand-in for a kill)."""
    from tqdm.auto import tqdm

    from specjax.training.data import build_corpus

    check_config(cfg)
    target = load_target(cfg["target"]) if target is None else target
    run = runs.run_dir(cfg["kind"], target.name, cfg, cfg.get("cache_dir"))
    run.mkdir(parents=True, exist_ok=True)
    meta = {"kind": cfg["kind"], "target": target.name, "module": dict(cfg.get("module") or {}),
            "config": cfg}
    (run / "run.json").write_text(json.dumps(meta, indent=1, default=str))
    corpus = corpus or build_corpus(target, cfg["data"], seq_len=cfg["seq_len"],
                                    seed=cfg["seed"], cache_dir=cfg.get("cache_dir"),
                                    progress=cfg.get("progress", True))
    counts = np.zeros(int(target.vocab_size), np.int64)  # for draft_vocab (FR-Spec subsets)
    for stream in corpus.train.values():
        counts += np.bincount(stream, minlength=counts.size)[: counts.size]
    np.save(run / "token_counts.npy", counts)
    trainer = Trainer(cfg, target)
    mngr = runs.checkpoint_manager(run, keep=cfg.get("keep", 2))
    restored = checkpoints.restore(mngr, trainer.params, trainer.opt_state)
    start, elapsed = 0, 0.0
    progress_file = run / "progress.json"  # wall time at each checkpoint: resumed runs add up
    history = json.loads(progress_file.read_text()) if progress_file.is_file() else {}
    if restored is not None:
        start, trainer.params, trainer.opt_state = restored
        elapsed = history.get(str(start), 0.0)
    steps, B, T, seed = cfg["steps"], cfg["batch_size"], cfg["seq_len"], cfg["seed"]
    eval_set = corpus.eval_batches(seed, cfg["eval_batches"], B, T)
    if tracker is not None:
        tracker.start(run, name=f"train-{cfg['kind']}-{runs.config_hash(cfg)}", config=cfg)
    bar = tqdm(range(start, steps), initial=start, total=steps, unit="step",
               desc=f"specjax-train {cfg['kind']}", disable=not cfg.get("progress", True))
    t0 = time.perf_counter() - elapsed
    last_eval: dict[str, float] = {}
    for s in bar:
        metrics = trainer.train_step(corpus.train_batch(seed, s, B, T))
        done = s + 1
        if done % cfg["log_every"] == 0 or done == steps:
            logged = {k: float(v) for k, v in metrics.items()} | {
                "lr": float(trainer.schedule(s)), "tokens": done * B * T}
            bar.set_postfix(loss=f"{logged['loss']:.3f}", lr=f"{logged['lr']:.2e}")
            if tracker is not None:
                tracker.log({f"train/{k}": v for k, v in logged.items()}, step=done)
        if done % cfg["eval_every"] == 0 or done == steps:
            last_eval = trainer.evaluate(eval_set)
            if tracker is not None:
                tracker.log({f"eval/{k}": v for k, v in last_eval.items()}, step=done)
        if done % cfg["save_every"] == 0 or done == steps:
            checkpoints.save(mngr, done, trainer.params, trainer.opt_state)
            history[str(done)] = time.perf_counter() - t0
            progress_file.write_text(json.dumps(history))
        if stop_after is not None and done >= stop_after:
            return {"step": done, "params": trainer.params, "opt_state": trainer.opt_state,
                    "run_dir": str(run)}
    if not last_eval:  # resumed after the last step: evaluate the restored weights
        last_eval = trainer.evaluate(eval_set)
    final = {"kind": cfg["kind"], "target": target.name, "run_dir": str(run), "step": steps,
             "eval": last_eval, "tokens_seen": steps * B * T, "corpus": corpus.counts(),
             "wall_time_s": time.perf_counter() - t0, "module": meta["module"],
             "params": int(sum(x.size for x in jax.tree.leaves(trainer.params))),
             "target_config": dataclasses.asdict(trainer.target.config)}
    (run / "final.json").write_text(json.dumps(final, indent=1))
    runs.mark_latest(run)
    if tracker is not None:
        tracker.log_summary({f"eval/{k}": v for k, v in last_eval.items()}
                            | {"wall_time_s": final["wall_time_s"]})
        tracker.finish()
    final["params_state"] = trainer.params
    final["opt_state"] = trainer.opt_state
    return final
