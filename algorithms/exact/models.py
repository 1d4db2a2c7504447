"""Toy autoregressive models for exact checks: a model maps a context tuple to a law over V.

Contexts are tuples of token ids relative to the start of generation. The Dirichlet model
hashes the context with md5 (docs/concepts.md), so the published random-pair numbers can be
reproduced seed for seed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cache

import numpy as np

Context = tuple[int, ...]


def _ctx_rng(seed, ctx: Context) -> np.random.Generator:
    digest = hashlib.md5(f"{seed}:{ctx}".encode()).hexdigest()[:8]
    return np.random.default_rng(int(digest, 16))


@dataclass(frozen=True)
class ToyModel:
    """Base: subclasses implement ``law``; calls are memoised per context."""

    V: int

    def __call__(self, ctx: Context) -> np.ndarray:
        return self._cached(tuple(ctx))

    def _cached(self, ctx: Context) -> np.ndarray:
        cache = self.__dict__.setdefault("_memo", {})
        if ctx not in cache:
            law = np.asarray(self.law(ctx), dtype=np.float64)
            law.setflags(write=False)
            cache[ctx] = law
        return cache[ctx]

    def law(self, ctx: Context) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class DirichletModel(ToyModel):
    """Context-dependent random laws: Dirichlet(concentration) seeded by md5(seed:ctx)."""

    seed: int = 0
    concentration: float = 1.0

    def law(self, ctx):
        return _ctx_rng(self.seed, ctx).dirichlet(np.full(self.V, self.concentration))


@dataclass(frozen=True)
class ConstantModel(ToyModel):
    """The same law at every context (the running example uses p=(1/3,2/3), q=(2/3,1/3))."""

    probs: tuple[float, ...] = field(default=())

    def law(self, ctx):
        return np.asarray(self.probs, dtype=np.float64)


@dataclass(frozen=True)
class MaskedModel(ToyModel):
    """A Dirichlet model restricted to an allowed token set (which may depend on the context)."""

    seed: int = 0
    allowed: tuple[int, ...] = ()

    def law(self, ctx):
        w = _ctx_rng(self.seed, ctx).dirichlet(np.ones(self.V))
        mask = np.zeros(self.V)
        mask[list(self.allowed)] = 1.0
        w = w * mask
        return w / w.sum()


@dataclass(frozen=True)
class OneHotModel(ToyModel):
    """A deterministic model (like an n-gram drafter): one token per context, chosen by hash."""

    seed: int = 0

    def law(self, ctx):
        out = np.zeros(self.V)
        out[_ctx_rng(self.seed, ctx).integers(self.V)] = 1.0
        return out


def example_pair() -> tuple[ToyModel, ToyModel]:
    """The running example (docs/concepts.md): target p=(1/3, 2/3), draft q=(2/3, 1/3)."""
    return ConstantModel(2, (1 / 3, 2 / 3)), ConstantModel(2, (2 / 3, 1 / 3))


def random_pair(V: int, seed: int, concentration: float = 1.0) -> tuple[ToyModel, ToyModel]:
    """Target and draft of the random-pair tables (docs/concepts.md): P seeds 500+seed, Q seeds
    900+seed."""
    return (DirichletModel(V, 500 + seed, concentration),
            DirichletModel(V, 900 + seed, concentration))


@cache
def adversarial_pairs(V: int) -> dict[str, tuple[ToyModel, ToyModel]]:
    """Edge cases where sloppy 0/0 handling or residuals go wrong. Needs V >= 2."""
    evens = tuple(range(0, V, 2))
    odds = tuple(range(1, V, 2))
    rest = tuple(range(1, V))
    return {
        "p_equals_q": (DirichletModel(V, 7), DirichletModel(V, 7)),
        "disjoint_supports": (MaskedModel(V, 11, evens), MaskedModel(V, 12, odds)),
        "one_hot_q": (DirichletModel(V, 13), OneHotModel(V, 14)),
        "one_hot_p_and_q": (OneHotModel(V, 15), OneHotModel(V, 16)),
        "q_zero_where_p_positive": (DirichletModel(V, 17), MaskedModel(V, 18, rest)),
        "p_zero_where_q_positive": (MaskedModel(V, 19, rest), DirichletModel(V, 20)),
        "peaked": (DirichletModel(V, 21, 0.1), DirichletModel(V, 22, 0.1)),
    }
