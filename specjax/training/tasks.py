"""What each drafter kind trains, and its loss on a batch of token windows.

Every loss is written for ONE window of T tokens and vmapped over the batch. The target is
frozen (its features and laws are ``stop_gradient``-ed); only the trainable module gets
gradients. Logits go through ``Decoder.read_out(differentiable=True)``: the tied head's
custom_vmap contraction has no reverse-mode rule.

- ``eagle`` (EAGLE, Li et al. 2024, §3.2): pairs (f_{j-1}, x_j) -> f̂_j; loss = soft
  cross-entropy of the read-out of f̂_j against the target's law at j (the law of x_{j+1}) +
  ``feature_weight`` · smooth-L1(f̂_j, f_j). ``unroll=2`` adds the same loss for a second pass
  that reads the head's own features (f̂ instead of f), the regime of drafting steps 2..L.
- ``medusa`` (Cai et al. 2024, §2.1.1): head i at position t predicts x_{t+i+1}; hard-label
  cross-entropy averaged over heads (``Medusa-1``: the target is frozen).
- ``family``: next-token cross-entropy of a tiny decoder (its perplexity is what SDSL uses).

Metrics per batch: the loss parts and ``alpha``, the expected acceptance of one draft token at
T = 1, mean Σ_v min(p(v), q(v)) over positions (Leviathan et al. 2023, Def. 3.1), against the
target's law at the same position (for Medusa head 1: the law at t + 1, given the true x_{t+1}).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.drafters.eagle import EagleDrafter
from specjax.drafters.family import family_decoder
from specjax.drafters.medusa import MedusaDrafter
from specjax.models.config import ModelConfig
from specjax.models.decoder import Decoder

KINDS = ("eagle", "medusa", "family")


def make_trainable(kind: str, target_config: ModelConfig, *, seed: int = 0, **options):
    """The module ``kind`` trains, built by the drafter side that later drafts with it."""
    if kind == "eagle":
        _no_options(kind, options)
        return EagleDrafter.trainable(target_config, seed=seed)
    if kind == "medusa":
        num_heads = options.pop("num_heads", 4)
        _no_options(kind, options)
        return MedusaDrafter.trainable(target_config, seed=seed, num_heads=num_heads)
    if kind == "family":
        hidden_size, num_layers = options.pop("hidden_size", 64), options.pop("num_layers", 1)
        _no_options(kind, options)
        return family_decoder(target_config, hidden_size, num_layers, seed=seed)
    raise ValueError(f"kind: unknown drafter kind {kind!r}; allowed: {', '.join(KINDS)}")


def _no_options(kind: str, options: dict) -> None:
    if options:
        raise ValueError(f"{kind}: unknown module option(s) {sorted(options)}")


def _target_pass(target: Decoder, tokens):
    f = target.features_of(target.hidden(tokens))
    p = jax.nn.softmax(target.read_out(f, differentiable=True), axis=-1)
    return jax.lax.stop_gradient(f), jax.lax.stop_gradient(p)


def _soft_ce(p, logits):
    return -jnp.mean(jnp.sum(p * jax.nn.log_softmax(logits, axis=-1), axis=-1))


def _alpha(p, logits):
    return jnp.mean(jnp.sum(jnp.minimum(p, jax.nn.softmax(logits, axis=-1)), axis=-1))


def _smooth_l1(x):
    a = jnp.abs(x)
    return jnp.mean(jnp.where(a < 1.0, 0.5 * a * a, a - 0.5))


def eagle_loss(head, target: Decoder, tokens, *, feature_weight: float = 0.1, unroll: int = 1):
    f, p = _target_pass(target, tokens)
    emb = jax.lax.stop_gradient(target.embed[...][tokens])
    shift = lambda g: jnp.concatenate([jnp.zeros_like(g[:1]), g[:-1]])  # noqa: E731
    f_hat = head.sequence(emb, shift(f))
    logits = target.read_out(f_hat, differentiable=True)
    ce, feat = _soft_ce(p, logits), _smooth_l1(f_hat - f)
    loss = ce + feature_weight * feat
    metrics = {"ce": ce, "feature_l1": feat, "alpha": _alpha(p, logits)}
    if unroll >= 2:  # the head on its own features: the regime of drafting steps 2..L
        f2 = head.sequence(emb, shift(f_hat))
        logits2 = target.read_out(f2, differentiable=True)
        ce2 = _soft_ce(p, logits2)
        loss = loss + ce2 + feature_weight * _smooth_l1(f2 - f)
        metrics |= {"ce_unrolled": ce2, "alpha_unrolled": _alpha(p, logits2)}
    return loss, metrics


def medusa_loss(heads, target: Decoder, tokens):
    f, p = _target_pass(target, tokens)
    T, H = tokens.shape[0], heads.num_heads
    logits = target.read_out(heads(f), differentiable=True)  # [T, H, V]: head i+1 at t
    logp = jax.nn.log_softmax(logits, axis=-1)
    t = jnp.arange(T)[:, None]
    ahead = t + jnp.arange(H)[None, :] + 2  # head i (0-based) at t predicts x_{t+i+2}
    valid = ahead < T
    label = tokens[jnp.minimum(ahead, T - 1)]
    nll = -jnp.take_along_axis(logp, label[..., None], axis=-1)[..., 0]
    per_head = jnp.sum(jnp.where(valid, nll, 0.0), axis=0) / jnp.maximum(valid.sum(0), 1)
    acc = jnp.sum(jnp.where(valid, jnp.argmax(logits, -1) == label, False), 0) / jnp.maximum(
        valid.sum(0), 1)
    metrics = {"ce": per_head.mean(), "ce_head1": per_head[0], "top1_head1": acc[0],
               "alpha": _alpha(p[1:], logits[:-1, 0])}  # head 1 at t vs the target at t + 1
    return per_head.mean(), metrics


def family_loss(model: Decoder, target: Decoder | None, tokens, *, with_alpha: bool = False):
    logits = model.read_out(model.features_of(model.hidden(tokens)), differentiable=True)
    logp = jax.nn.log_softmax(logits[:-1], axis=-1)
    nll = -jnp.mean(jnp.take_along_axis(logp, tokens[1:, None], axis=-1))
    metrics = {"ce": nll}
    if with_alpha:
        _, p = _target_pass(target, tokens)
        metrics["alpha"] = _alpha(p, logits)
        metrics["target_ce"] = -jnp.mean(jnp.log(jnp.take_along_axis(
            p[:-1], tokens[1:, None], axis=-1) + 1e-30))
    return nll, metrics


def batch_loss(kind: str, options: dict, trainable, target, tokens, *, eval_mode: bool = False):
    """Mean loss and metrics over a [B, T] batch (the per-window losses vmapped)."""
    if kind == "eagle":
        one = lambda x: eagle_loss(trainable, target, x, **options)  # noqa: E731
    elif kind == "medusa":
        one = lambda x: medusa_loss(trainable, target, x)  # noqa: E731
    else:
        one = lambda x: family_loss(trainable, target, x, with_alpha=eval_mode)  # noqa: E731
    loss, metrics = jax.vmap(one)(tokens)
    return loss.mean(), jax.tree.map(jnp.mean, metrics)
