"""Record the verifier's own inputs inside the jitted decode loop.

Why: a verifier's cost and behaviour depend on its data (SpecTr searches rho at every depth
where two drafts survive; real code drafts agree over whole blocks), so timing it on random laws
measures another verifier. ``InputRecorder`` wraps any verifier, leaves its verdict unchanged and
hands each call's (drafts, q, p) to the host, where an ``InputSink`` keeps the first ``limit``
calls. Those are the exact arguments the engine passes: after the sampling transform, with the
shared root laws the verifier contract asks for. ``benchmarks.dump_verify_inputs`` writes them
to a file that ``benchmarks.verify_cost --mode npz`` times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from specjax.eval.wrapper import WrapsVerifier


@dataclass(eq=False)
class InputSink:
    """Host-side store of recorded calls (identity-hashed, so a frozen wrapper can hold it).

    A batched loop hands one call per sequence and step, each stored on its own, rows that
    already finished included (the loop runs until its slowest row ends), so a dump that should
    hold only live calls decodes at batch 1."""

    limit: int
    calls: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)

    def __call__(self, drafts, q, p) -> None:
        if len(self.calls) < self.limit:
            self.calls.append((np.array(drafts), np.array(q), np.array(p)))

    @property
    def full(self) -> bool:
        return len(self.calls) >= self.limit

    def stacked(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(drafts [N, K, L] int32, q [N, K, L, V] float32, p [N, K, L+1, V] float32)."""
        if not self.calls:
            raise ValueError("no verifier call was recorded (did the loop run any step?)")
        d, q, p = zip(*self.calls, strict=True)
        return (np.stack(d).astype(np.int32), np.stack(q).astype(np.float32),
                np.stack(p).astype(np.float32))


@dataclass(frozen=True)
class InputRecorder(WrapsVerifier):
    """``verifier`` unchanged, and every call's inputs sent to ``sink`` on the host."""

    verifier: Any
    sink: InputSink

    def __call__(self, key, drafts, q, p, state):
        jax.debug.callback(self.sink, drafts, q, p)
        return self.verifier(key, drafts, q, p, state)


__all__ = ["InputRecorder", "InputSink"]
