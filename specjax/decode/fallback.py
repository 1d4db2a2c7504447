"""Speculate only while it pays: plain autoregressive steps when the drafts are not accepted.

A speculative step costs the draft forwards and a tree pass of L + 1 tokens, ``break_even``
times an autoregressive step (measured on this machine, ``specjax.tuning.fallback``); it pays
only when it emits more than that many tokens. On open chat the int8 0.5B draft's blocks are
accepted too rarely for that (MT-Bench at 0.91x AR, ``paper_repro/results/policies_cpu.md``).
The rule keeps a running mean of the tokens a speculative step emitted (weight ``decay`` on the
past: 0.8, so it falls back after three or four poor steps, not after one: with 0.5 a single
one-token step pulled a mean of 2.7 below a break-even of 1.9, and on MT-Bench the loop took AR
steps on 42 % of its steps where plain speculation ran at 1.3x AR; Intel Xeon family 6 model
167, 8 prompts); below ``break_even``
the loop takes autoregressive steps (the target's decode alone, no draft forward), then tries
one speculative step again after 1, 2, 4, ... up to ``max_wait`` of them (exponential backoff,
as a retransmission timer backs off). The draft model sees the tokens it missed when the next
speculative step starts (``ModelDrafter.resync``: chunks of its scratch size per forward).

Why it stays lossless: whether a step speculates is decided before it runs, from the tokens
emitted by earlier steps only, never from this step's drafts or laws. Each step is then either
an exact autoregressive step or an exact speculative step (Leviathan et al. 2023, Thm 3.5),
so every token is drawn from the target's law given the history, whichever kind emitted it.
The choice is a function of the history, so a seed gives the same tokens on every run.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Bool, Float, Int


@struct.dataclass
class FallbackState:
    mean: Float[Array, ""]  # running mean of the tokens a speculative step emitted
    wait: Int[Array, ""]  # autoregressive steps left before the next speculative try
    backoff: Int[Array, ""]  # the next wait after a speculative step that did not pay
    ar_steps: Int[Array, ""]  # autoregressive steps taken (a counter, reported per prompt)


@dataclass(frozen=True, kw_only=True)
class Fallback:
    """The rule (static under jit). ``break_even``: tokens a speculative step must emit to cost
    no more per token than autoregressive steps; ``decay``: the running mean's weight on the
    past; ``max_wait``: the longest stretch of autoregressive steps between speculative ones."""

    break_even: float
    decay: float = 0.8
    max_wait: int = 16

    def __post_init__(self):
        if not (isinstance(self.break_even, int | float) and self.break_even >= 1.0):
            raise ValueError(f"fallback.break_even must be a number >= 1 (tokens per "
                             f"speculative step), got {self.break_even!r}")
        if not (0.0 <= self.decay < 1.0):
            raise ValueError(f"fallback.decay must be in [0, 1), got {self.decay!r}")
        if not (isinstance(self.max_wait, int) and self.max_wait >= 1):
            raise ValueError(f"fallback.max_wait must be an integer >= 1, got {self.max_wait!r}")

    def init(self) -> FallbackState:
        # One token above the break-even: a few poor first steps, not one, start a fallback.
        return FallbackState(mean=jnp.float32(self.break_even + 1.0), wait=jnp.int32(0),
                             backoff=jnp.int32(1), ar_steps=jnp.int32(0))

    @staticmethod
    def speculates(st: FallbackState) -> Bool[Array, ""]:
        return st.wait == 0

    def after_speculative(self, st: FallbackState, emitted: Int[Array, ""]) -> FallbackState:
        mean = self.decay * st.mean + (1.0 - self.decay) * emitted.astype(jnp.float32)
        pays = mean >= self.break_even
        return st.replace(mean=mean, wait=jnp.where(pays, 0, st.backoff),
                          backoff=jnp.where(pays, 1, jnp.minimum(2 * st.backoff, self.max_wait)))

    @staticmethod
    def after_autoregressive(st: FallbackState) -> FallbackState:
        return st.replace(wait=jnp.maximum(st.wait - 1, 0), ar_steps=st.ar_steps + 1)
