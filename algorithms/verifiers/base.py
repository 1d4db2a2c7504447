"""The verifier contract every speculative-decoding verifier in specjax follows.

A verifier turns (draft blocks, the draft laws they were sampled from, the target laws at every
drafted prefix, a key) into the emitted tokens. Keeping it a pure function on probability arrays
is what lets the same file run inside the jitted decode loop and be checked against its float64
exact law (``algorithms.exact``).

Claims are class-level facts (``ClassVar``), never constructor fields, so no config or caller can
switch a biased verifier to "lossless" by passing ``lossless=True``:

- ``lossless``: the verifier emits exactly the target law (for every draft structure it accepts).
- ``max_drafts``: 1 for single-draft verifiers, None for any K.
- ``draft_structures``: the draft structures (below) the verifier is defined for; for a lossless
  verifier, it is lossless for each of them. A verifier without this attribute is taken to accept
  ``{IID}`` only.

Draft structures. Each drafter declares one (``Drafter.draft_structure``):

- ``IID``: the K drafts are i.i.d. draws from q (draft model, early exit). ``q[k, t]`` is the same
  law for drafts sharing a prefix.
- ``DETERMINISTIC``: the drafts are fixed functions of the context (prompt lookup), distinct or
  duplicated, with one-hot q at each draft's own token. They are not i.i.d. draws from any shared
  law, so a rule that relies on exchangeable draws (SpecTr's K-SEQ residual) is biased on them.
- ``GREEDY``: Hu et al.'s greedy multi-drafting (``specjax.drafters.greedy``): K-1 roots fixed at
  the draft's top tokens (one-hot q), one root sampled from q restricted to the rest, every draft
  continued i.i.d. from the draft model. Only ``greedy_draft`` is built for it.
- ``STOPPED``: IID drafts drawn token by token from q, each of which may stop before L: the
  drafter decides after each token, from its own laws and tokens only, whether that draft
  draws the next (``specjax.drafters.adaptive`` with K = 1, ``specjax.drafters.dynamic_tree``).
  Positions not drafted carry an all-zero q row, which a verifier must read as "no draft here"
  (the draft leaves the node; with no draft left, the correction is drawn from p itself). Only
  verifiers that list it take it, at any K: block verification's convention min(1, p/0) = 1
  would accept a position that was never drafted.

With K = 1 IID and DETERMINISTIC are the same thing (one draw from q), so only K > 1 of them is
ever refused; STOPPED is refused at any K by a verifier that does not list it.
``check_pairing`` is the one place that decides; the API and the CLI both call it before compiling.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

PyTree = Any

# Probability arrays must sum to 1 within this tolerance when values are checked (float32 laws
# produced by a softmax over 150k logits are only accurate to ~1e-5).
PROB_ATOL = 1e-3

IID = "iid"
DETERMINISTIC = "deterministic"
GREEDY = "greedy"
STOPPED = "stopped"
DRAFT_STRUCTURES = (IID, DETERMINISTIC, GREEDY, STOPPED)


class Verdict(NamedTuple):
    """What one verification step emits.

    ``tokens`` holds the accepted draft prefix followed by exactly one extra token (a correction
    from a residual, or a bonus from the target after a full block), padded with -1.
    """

    tokens: Int[Array, " L+1"]
    num_emitted: Int[Array, ""]  # tau + 1, in [1, L + 1]
    draft_index: Int[Array, ""]  # draft whose prefix was accepted (0 when tau == 0)


class Verifier(Protocol):
    """Frozen, hashable dataclass: static under ``jax.jit``. Claims are ClassVars (see above)."""

    lossless: ClassVar[bool]  # claims the exact target law; checked by tests, never assumed
    max_drafts: ClassVar[int | None]  # 1 for single-draft verifiers, None for any K
    draft_structures: ClassVar[frozenset[str]]  # a subset of DRAFT_STRUCTURES (see above)

    def init_state(self, L: int, V: int) -> PyTree: ...

    def __call__(
        self,
        key: Array,
        drafts: Int[Array, "K L"],
        q: Float[Array, "K L V"],
        p: Float[Array, "K L+1 V"],
        state: PyTree,
    ) -> tuple[Verdict, PyTree]: ...


@runtime_checkable
class ReadsOut(Protocol):
    """A verifier that also measures: it sums something in its state, and the decode loop adds
    ``readout(final state)`` to its counters (``specjax.eval.root_bound`` sums the optimum's
    acceptance bound this way). The verdicts are the wrapped rule's; a verifier without this
    method adds nothing."""

    def readout(self, state: PyTree) -> dict[str, Array]: ...


def accepted_structures(verifier) -> frozenset[str]:
    return frozenset(getattr(verifier, "draft_structures", frozenset({IID})))


def check_pairing(verifier, draft_structure: str, K: int, *, drafter_name: str = "drafter") -> None:
    """Raise one ``ValueError`` line when ``verifier`` cannot take K drafts of this structure."""
    name = type(verifier).__name__
    if draft_structure not in DRAFT_STRUCTURES:
        raise ValueError(f"{drafter_name}: draft_structure must be one of {DRAFT_STRUCTURES}, "
                         f"got {draft_structure!r}")
    max_drafts = getattr(verifier, "max_drafts", None)
    if max_drafts is not None and K > max_drafts:
        raise ValueError(f"pairing: {name} takes at most max_drafts={max_drafts} draft(s), but "
                         f"{drafter_name} has K={K}")
    if (K > 1 or draft_structure == STOPPED) and draft_structure not in accepted_structures(
            verifier):
        raise ValueError(
            f"pairing: {drafter_name} ({draft_structure} drafts, K={K}) with {name} is refused: "
            f"{name} is only defined for {sorted(accepted_structures(verifier))} drafts; "
            + ("use verifier 'token' (K=1) or 'specinfer'" if draft_structure == STOPPED
               else "use K=1 or a verifier that accepts them (e.g. specinfer, traversal)"))


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def validate_inputs(verifier, drafts, q, p) -> tuple[int, int, int]:
    """Raise one clear ``ValueError`` for malformed verifier inputs; return (K, L, V).

    Shapes are static, so this runs at trace time (outside jit) and costs nothing in the loop.
    Values are checked only on concrete arrays: inside jit they are tracers and checking would
    need a host round trip.
    """
    name = type(verifier).__name__
    if drafts.ndim != 2:
        raise ValueError(f"{name}: drafts must have shape [K, L], got {tuple(drafts.shape)}")
    K, L = drafts.shape
    if K < 1 or L < 1:
        raise ValueError(f"{name}: drafts must have K >= 1 and L >= 1, got K={K}, L={L}")
    if q.ndim != 3 or q.shape[:2] != (K, L):
        raise ValueError(f"{name}: q must have shape [K={K}, L={L}, V], got {tuple(q.shape)}")
    V = q.shape[2]
    if p.shape != (K, L + 1, V):
        raise ValueError(
            f"{name}: p must have shape [K={K}, L+1={L + 1}, V={V}], got {tuple(p.shape)}"
        )
    if verifier.max_drafts is not None and K > verifier.max_drafts:
        raise ValueError(
            f"{name}: K={K} drafts given but this verifier takes at most "
            f"max_drafts={verifier.max_drafts}"
        )
    if all(_is_concrete(a) for a in (drafts, q, p)):
        d = np.asarray(drafts)
        if d.min() < 0 or d.max() >= V:
            raise ValueError(f"{name}: drafts must be token ids in [0, V={V})")
        for label, a in (("q", np.asarray(q)), ("p", np.asarray(p))):
            if (a < 0).any():
                raise ValueError(f"{name}: {label} has negative probabilities")
            err = np.abs(a.sum(-1) - 1.0).max()
            if err > PROB_ATOL:
                raise ValueError(
                    f"{name}: {label} rows must sum to 1 (max deviation {err:.2e} > {PROB_ATOL})"
                )
    return K, L, V


def safe_ratio(num: Array, den: Array) -> Array:
    """min(1, num/den) with the block-verification convention: 1 where den == 0 or num >= den."""
    return jnp.where(num >= den, 1.0, num / jnp.where(den > 0, den, 1.0))


def residual(weighted_target: Float[Array, " V"], draft: Float[Array, " V"],
             fallback: Float[Array, " V"]) -> Float[Array, " V"]:
    """norm(max(weighted_target - draft, 0)), or ``fallback`` when that has no mass.

    Zero residual mass only happens on probability-0 branches, where any law is correct; the
    fallback keeps the sample well defined instead of producing NaN.
    """
    r = jnp.maximum(weighted_target - draft, 0.0)
    s = r.sum()
    return jnp.where(s > 0, r / jnp.where(s > 0, s, 1.0), fallback)


def sample(key: Array, probs: Float[Array, " V"]) -> Int[Array, ""]:
    """Draw a token from a probability vector (zeros are never drawn).

    The same draw as ``jax.random.categorical(key, logits)`` (Gumbel-max: the first index of
    the largest ``gumbel + logits``), with the argmax written as a max and a min over the
    indices that reach it: XLA:CPU runs ``argmax``'s (value, index) reduction unvectorized,
    0.84 vs 0.36 ms at V = 151,936, and a verifier draws at every rejected node."""
    logits = jnp.where(probs > 0, jnp.log(jnp.where(probs > 0, probs, 1.0)), -jnp.inf)
    noisy = jax.random.gumbel(key, logits.shape, logits.dtype) + logits
    top = jnp.max(noisy, axis=-1, keepdims=True)
    index = jnp.arange(noisy.shape[-1], dtype=jnp.int32)
    return jnp.min(jnp.where(noisy == top, index, noisy.shape[-1]), axis=-1)


def emit(accepted: Int[Array, " L"], tau: Int[Array, ""], extra: Int[Array, ""],
         draft_index: Int[Array, ""]) -> Verdict:
    """Assemble a Verdict: accepted[:tau], then ``extra`` at index tau, then -1 padding."""
    L = accepted.shape[0]
    idx = jnp.arange(L + 1)
    padded = jnp.concatenate([accepted.astype(jnp.int32), jnp.zeros((1,), jnp.int32)])
    tokens = jnp.where(idx < tau, padded, jnp.where(idx == tau, extra, -1)).astype(jnp.int32)
    return Verdict(tokens, (tau + 1).astype(jnp.int32), jnp.asarray(draft_index, jnp.int32))
