"""The drafter contract the decode loop calls (one sequence; the engine vmaps over the batch).

A drafter proposes K blocks of L tokens AND the laws q they were actually sampled from, after the
same sampling transform as the target (``specjax.models.sampling``). Reporting any other q silently
breaks losslessness (Leviathan et al. 2023, Thm 3.5 assumes x ~ q), which is why the engine's
Monte Carlo test includes a drafter that lies about q and must fail.

Drafters are frozen, hashable dataclasses (static under jit). What runs on device is explicit:
``module(target, draft)`` names the nnx module the drafter needs (or None); the engine splits it,
passes its state through jit, merges it and hands it back to ``init_state``/``propose``/``update``
as ``model``. Per-sequence drafter state (e.g. a draft KV cache) is a pytree the engine threads.

Each drafter also declares its draft structure (``algorithms.verifiers.base``): IID when its K
drafts are independent draws from the q it reports (draft model, early exit, EAGLE, Medusa),
DETERMINISTIC when they are fixed functions of the context with one-hot q (prompt lookup), GREEDY
for Hu et al.'s greedy multi-drafting, STOPPED when each draft may end before L (adaptive length,
dynamic tree). Verifiers are lossless only for the structures they list, so the pairing is
checked (``algorithms.verifiers.check_pairing``) before anything compiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from jaxtyping import Array, Float, Int

from algorithms.verifiers.base import Verdict
from specjax.models.sampling import Sampling

PyTree = Any


class Drafter(Protocol):
    K: int
    L: int
    # How the K drafts relate (``algorithms.verifiers.base.DRAFT_STRUCTURES``: IID,
    # DETERMINISTIC, GREEDY or STOPPED). A class-level fact the engine checks against the
    # verifier's ``draft_structures`` before compiling.
    draft_structure: ClassVar[str]
    # The drafter reads the target's hidden features (EAGLE, Medusa): the loop then has prefill
    # and the tree pass return them, and passes ``features=`` to ``init_state`` and ``update``.
    target_features: ClassVar[bool]

    def module(self, target, draft) -> Any:
        """The nnx module run on device (None for model-free drafters); validates inputs."""

    def scratch(self) -> int:
        """Scratch slots the drafter's cache needs for one step (besides the prompt prefill)."""

    def calls_per_step(self) -> int:
        """Draft forward passes per decode step (the ``drafter_calls`` counter)."""

    def init_state(self, model, prompt: Int[Array, " P"], length: Int[Array, ""], *,
                   max_len: int, scratch: int) -> PyTree: ...

    def propose(self, model, key: Array, state: PyTree, history: Int[Array, " T"],
                n: Int[Array, ""], *, sampling: Sampling, vocab_size: int, scratch: int,
                ) -> tuple[Int[Array, "K L"], Float[Array, "K L V"], PyTree]:
        """Drafts and their laws; ``history[:n]`` is prompt + generated, ``history[n-1]`` the
        pending token (not yet in any cache)."""

    def update(self, model, state: PyTree, drafts: Int[Array, "K L"], verdict: Verdict,
               n: Int[Array, ""], *, scratch: int) -> PyTree:
        """Sync the drafter state with the accepted path (``n`` as passed to ``propose``)."""


@dataclass(frozen=True, kw_only=True)
class BlockShape:
    """K drafts of length L: the fields every drafter has, validated once."""

    K: int = 1
    L: int = 4
    target_features: ClassVar[bool] = False  # ``Drafter.target_features``

    def __post_init__(self):
        name = type(self).__name__
        if not (isinstance(self.K, int) and self.K >= 1):
            raise ValueError(f"{name}: K (number of drafts) must be an integer >= 1, got {self.K}")
        if not (isinstance(self.L, int) and self.L >= 1):
            raise ValueError(f"{name}: L (draft length) must be an integer >= 1, got {self.L}")
