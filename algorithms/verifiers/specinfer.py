"""SpecInfer multi-draft recursive rejection sampling (RRS), and RRSw without replacement.

Miao et al., "SpecInfer: Accelerating Large Language Model Serving with Tree-based Speculative
Inference and Verification", ASPLOS 2024 (arXiv 2305.09781), multi-step speculative sampling;
Jeon et al., "Recursive Speculative Decoding: Accelerating LLM Inference via Sampling Without
Replacement", arXiv 2402.14160 (RRSw). Restated in docs/verifiers/specinfer.md.

One tree node: start from r = p(.|z); for each surviving draft k in draft-index order,
accept its next token x_k with probability min(1, r(x_k) / q_k(x_k)); on rejection update
r <- norm(max(r - q_k, 0)). Duplicated tokens are separate trials and still update r (a rejected
token has r(x) = 0 afterwards, so its later duplicates are always rejected). If every trial
fails, the correction is drawn from the final r and the iteration stops. After an acceptance the
survivors are the drafts whose next token equals the accepted one; with survivors at
depth L a bonus token is drawn from p(.|prefix).

Why this is lossless: by induction from the last trial, the output law of "trials k.. then the
final residual" equals the current r whenever x_k is drawn from q_k given the earlier
candidates, so the node emits exactly p(.|z); the accepted child's survivors then draw their
continuations by the same scheme, so the child emits p(.|z, x) in turn.

The proof never uses how many candidates a node has, only that each one is drawn from its law
given the earlier ones; so drafts that stop early by a rule of the draft's own past (draft
structure STOPPED, ``specjax.drafters.dynamic_tree``) are verified by the same loop. A position
a draft did not fill has an all-zero q row, so its filler token has q(x) = 0, while a drafted
token always has q(x) > 0: the draft takes no part in that node or below it, and a node left
with no candidates emits its correction from p itself.

RRSw changes only what the drafter hands in, so it is not an option of this class: the
same kernel verifies without-replacement drafts when ``q[k, t]`` is each draft's sequential law
(no drafter in ``specjax.drafters`` produces them yet; the exact law's ``replacement=False`` and
the RRSw Monte Carlo test cover the scheme). Sampling scheme:
drafts are drawn depth by depth; at depth t the drafts sharing the same t-token prefix form a
group and, in draft-index order, each draws its next token from q(.|prefix) restricted to the
tokens not yet drawn by earlier drafts of its group, renormalised:
``q_k(x) = q(x) 1[x not in {x_1..x_{k-1}}] / (1 - sum_{j<k} q(x_j))``. When the earlier drafts of
the group have already drawn every token in q's support (group larger than the support), the
draft draws from the unrestricted q and ``q_k = q``. ``q[k, t]`` must be that sequential law q_k;
the verifier is the same RRS loop, which stays lossless because it only needs each candidate's
law given the earlier candidates at its node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float, Int

from algorithms.verifiers.base import (
    DETERMINISTIC,
    IID,
    STOPPED,
    Verdict,
    emit,
    residual,
    safe_ratio,
    sample,
    validate_inputs,
)
from algorithms.verifiers.registry import register


@register("specinfer", exact_law="algorithms.exact.specinfer:specinfer_law")
@dataclass(frozen=True, kw_only=True)
class SpecInferVerifier:
    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = None
    draft_structures: ClassVar[frozenset[str]] = frozenset({IID, DETERMINISTIC, STOPPED})

    def init_state(self, L: int, V: int):
        return ()

    @staticmethod
    def filled(drafts: Int[Array, "K L"], q: Float[Array, "K L V"]) -> Bool[Array, "K L"]:
        """Which positions were drafted: a drafted token has q > 0 at itself, an undrafted
        position (STOPPED) an all-zero row."""
        return jnp.take_along_axis(q, drafts[..., None], 2)[..., 0] > 0

    def rrs_node(
        self,
        r: Float[Array, " V"],
        tokens: Int[Array, " K"],
        laws: Float[Array, "K V"],
        live: Bool[Array, " K"],
        u: Float[Array, " K"],
    ) -> tuple[Int[Array, ""], Float[Array, " V"]]:
        """The one-node rule: (index of the accepted draft or -1, final residual r)."""

        def trial(carry, k):
            r, winner = carry
            x, q_k = tokens[k], laws[k]
            trying = live[k] & (winner < 0)
            accept = u[k] < safe_ratio(r[x], q_k[x])  # strict: u can be exactly 0
            winner = jnp.where(trying & accept, k, winner).astype(jnp.int32)  # int64 under x64
            # Every rejected trial updates r, duplicates included. cond, not where:
            # unbatched, the trials after the winner (and dead drafts) cost nothing.
            r = lax.cond(trying & ~accept, lambda: residual(r, q_k, fallback=r), lambda: r)
            return (r, winner), None

        (r, winner), _ = lax.scan(trial, (r, jnp.int32(-1)), jnp.arange(tokens.shape[0]))
        return winner, r

    def __call__(
        self,
        key: Array,
        drafts: Int[Array, "K L"],
        q: Float[Array, "K L V"],
        p: Float[Array, "K L+1 V"],
        state=(),
    ) -> tuple[Verdict, tuple]:
        K, L, _ = validate_inputs(self, drafts, q, p)
        k_coin, k_extra = jax.random.split(key)
        u = jax.random.uniform(k_coin, (L, K))
        tau, lead, law = survivor_scan(
            drafts, p, lambda t, lead, alive: self.rrs_node(p[lead, t], drafts[:, t], q[:, t],
                                                            alive, u[t]),
            filled=self.filled(drafts, q))
        extra = sample(k_extra, law)
        return emit(drafts[lead], tau, extra, lead), state


def survivor_scan(drafts: Int[Array, "K L"], p: Float[Array, "K L+1 V"], node, *,
                  filled: Bool[Array, "K L"] | None = None
                  ) -> tuple[Int[Array, ""], Int[Array, ""], Float[Array, " V"]]:
    """Walk the merged draft tree down the accepted path: (tau, lead draft, law of the extra
    token).

    At depth t, ``node(t, lead, alive)`` runs one node's rule over the drafts still alive (those
    sharing the accepted prefix; ``lead`` is the first of them) and returns (the accepted
    draft, or -1 when every candidate failed; the residual law). An acceptance keeps the drafts
    whose token equals the accepted one; a full rejection stops the walk with the residual as
    the correction's law; after depth L - 1 the bonus law is p at the lead's last prefix.
    ``filled`` drops each draft from the depths it did not draft (STOPPED). The node rule is
    the verifier's own (SpecInfer's RRS, ordered_rrs's order-statistic RRS); the walk is theirs in
    common."""
    K, L = drafts.shape

    def depth(carry, t):
        alive, stopped, tau, lead, law = carry
        active = ~stopped
        if filled is not None:
            alive = alive & filled[:, t]
        # cond, not where: unbatched, nodes after the stop cost nothing.
        winner, r = lax.cond(active, lambda: node(t, lead, alive),
                             lambda: (jnp.int32(-1), law))
        accepted = active & (winner >= 0)
        token = drafts[jnp.maximum(winner, 0), t]
        survivors = alive & (drafts[:, t] == token)
        alive = jnp.where(accepted, survivors, alive)
        lead = jnp.where(accepted, jnp.argmax(survivors).astype(jnp.int32), lead)
        tau = jnp.where(accepted, t + 1, tau).astype(jnp.int32)
        rejected_all = active & (winner < 0)
        law = jnp.where(rejected_all, r, law)
        return (alive, stopped | rejected_all, tau, lead, law), None

    init = (jnp.ones(K, bool), jnp.bool_(False), jnp.int32(0), jnp.int32(0), p[0, 0])
    (_, stopped, tau, lead, law), _ = lax.scan(depth, init, jnp.arange(L))
    return tau, lead, jnp.where(stopped, law, p[lead, L])  # bonus after a full block
