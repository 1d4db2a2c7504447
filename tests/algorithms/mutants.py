"""Deliberately broken verifiers and exact laws (each must FAIL the test that uses it).

They live here, not in the production classes: production verifiers expose the algorithm's own
steps as methods (``rho``, ``rrs_node``, ``selected_law``, ``updates_parent``,
``tests_sub_block``) and a mutant overrides one step. Every mutant claims ``lossless = False``.
"""

import dataclasses
from typing import ClassVar
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np

from algorithms.exact import ordered_rrs as exact_ordered_rrs
from algorithms.exact.checker import accumulate
from algorithms.exact.spectr import kseq_beta, kseq_rho
from algorithms.verifiers import multipath_block
from algorithms.verifiers.base import emit, sample
from algorithms.verifiers.multipath_block import MultiPathBlockVerifier, exclusive_cumsum
from algorithms.verifiers.ordered_rrs import OrderedRRSVerifier
from algorithms.verifiers.spectr import SpecTrVerifier
from algorithms.verifiers.spectr_gbv import SpecTrGBVVerifier
from algorithms.verifiers.traversal import TraversalVerifier


def residual_is_target(base: type) -> type:
    """Single-draft mutant of ``base``: after a rejection the correction comes from p(. | X_<=tau)
    instead of the verifier's residual (Leviathan Thm 3.5 / Sun et al. Eq. 4 dropped)."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class ResidualIsTarget(base):
        lossless: ClassVar[bool] = False

        def __call__(self, key, drafts, q, p, state=()):
            verdict, state = super().__call__(key, drafts, q, p, state)
            tau = verdict.num_emitted - 1
            L = drafts.shape[1]
            redraw = sample(jax.random.fold_in(key, 7), p[0, jnp.minimum(tau, L)])
            extra = jnp.where(tau == L, verdict.tokens[L], redraw)
            return emit(drafts[0], tau, extra, jnp.int32(0)), state

    ResidualIsTarget.__name__ = f"ResidualIsTarget{base.__name__}"
    return ResidualIsTarget


def lead_law_for_all(base: type) -> type:
    """Multi-draft mutant: every draft is verified against draft 0's q (an engine that treats
    lookup drafts as i.i.d. draws from one law). Harmless on i.i.d. inputs, biased on lookup."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class LeadLawForAll(base):
        lossless: ClassVar[bool] = False

        def __call__(self, key, drafts, q, p, state=()):
            return super().__call__(key, drafts, jnp.broadcast_to(q[:1], q.shape), p, state)

    LeadLawForAll.__name__ = f"LeadLawForAll{base.__name__}"
    return LeadLawForAll


@dataclasses.dataclass(frozen=True, kw_only=True)
class KSEQEverywhere(SpecTrVerifier):
    """SpecTr before the draft-structure fix: K-SEQ with the lead draft's q at every node, even
    when the survivors' q rows differ (lookup drafts): TV 0.146 on a V = 3 toy."""

    lossless: ClassVar[bool] = False

    def node(self, key, p, laws, lead, tokens, live, u):
        q_tokens = laws[jnp.arange(tokens.shape[0]), tokens]
        return self.kseq_node(key, p, laws[lead], tokens, q_tokens, live, u)


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifiesAgainstQ(MultiPathBlockVerifier):
    """Block verification of the selected path against q instead of q^Γ."""

    lossless: ClassVar[bool] = False

    def selected_law(self, x, q_k, keys_k, K):
        return q_k


@dataclasses.dataclass(frozen=True, kw_only=True)
class OrderedRRSPlainQ(OrderedRRSVerifier):
    """Every candidate tested against the lead survivor's row q instead of its order-statistic
    law Q_j: the largest of c draws is not q-distributed, and a lookup candidate other than the
    lead's token gets q(x) = 0, so it is always accepted. Harmless only when every survivor
    carries the same point mass (one-hot i.i.d. drafts)."""

    lossless: ClassVar[bool] = False

    def candidate_law(self, q_row, *args):
        return q_row


def _lead_row(weights, history, rows):
    return rows[0]


def ordered_rrs_plain_q_law(P, Q, ctx, state=(), *, L, K=1, order="band"):
    """Exact law of ``OrderedRRSPlainQ`` on i.i.d. drafts."""
    with mock.patch.object(exact_ordered_rrs, "candidate_law", _lead_row):
        return exact_ordered_rrs.ordered_rrs_law(P, Q, ctx, state, L=L, K=K, order=order)


def ordered_rrs_plain_q_fixed(P, drafts, ctx=(), *, order="band"):
    """Exact law of ``OrderedRRSPlainQ`` on a fixed (lookup) draft set."""
    with mock.patch.object(exact_ordered_rrs, "candidate_law", _lead_row):
        return exact_ordered_rrs.ordered_rrs_fixed(P, drafts, ctx, order=order)


def mass_below_without_band_zero(q_row, key_row, order):
    """The band order's F_< with band 0's q-mass left out of every band-1 token's: each band's
    own prefix sums only, as if band 1 started at 0."""
    upper = jnp.where(key_row == 1, q_row, 0.0)
    return jnp.where(key_row == 1, exclusive_cumsum(upper), exclusive_cumsum(q_row - upper))


@dataclasses.dataclass(frozen=True, kw_only=True)
class DropsLowerBandMass(MultiPathBlockVerifier):
    """q^Γ from ``mass_below_without_band_zero`` (order "band" only): BV is told a wrong law."""

    lossless: ClassVar[bool] = False

    def selected_law(self, x, q_k, keys_k, K):
        with mock.patch.object(multipath_block, "mass_below", mass_below_without_band_zero):
            return multipath_block.skewed_draft_law(x, q_k, keys_k, K, self.order)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SkipsDuplicates(TraversalVerifier):
    """No parent update on duplicate trials (the biased merge, docs/verifiers/traversal.md)."""

    lossless: ClassVar[bool] = False

    @staticmethod
    def updates_parent(accepted, new):
        return ~accepted & new


@dataclasses.dataclass(frozen=True, kw_only=True)
class IgnoresRejected(SpecTrGBVVerifier):
    """Sub-blocks already in H are tested again."""

    @staticmethod
    def tests_sub_block(done, t, tau, in_h):
        return ~done & (t > tau)


def spectr_kseq_everywhere_fixed(P, drafts, ctx=()):
    """Exact law of ``KSEQEverywhere`` on lookup drafts: K-SEQ at each node with the lead
    survivor's one-hot q as the shared law (the pre-fix rule the exact checker must reject)."""
    L, V = len(drafts[0]), P.V
    out: dict = {}

    def node(z, prob):
        p = P(ctx + z)
        if len(z) == L:
            for y in np.flatnonzero(p > 0):
                accumulate(out, z + (int(y),), prob * p[y])
            return
        alive = [k for k, d in enumerate(drafts) if d[:len(z)] == z]
        tokens = [drafts[k][len(z)] for k in alive]
        q = np.eye(V)[tokens[0]]
        m = len(tokens)
        rho = kseq_rho(p, q, m)
        beta = kseq_beta(p, q, rho)
        p_acc = 1.0 - (1.0 - beta) ** m
        law_y = np.zeros(V)
        reach = 1.0
        for x in tokens:  # each draft tested with its own q(x) = 1: min(1, p(x) / rho)
            a = min(1.0, p[x] / rho)
            law_y[x] += reach * a
            reach *= 1.0 - a
        res = np.maximum(p - np.minimum(q, p / rho) * (p_acc / beta if beta > 0 else 0.0), 0.0)
        res = res / res.sum() if res.sum() > 0 else p
        law_y += reach * res
        for y in np.flatnonzero(law_y > 0):
            if int(y) in tokens:
                node(z + (int(y),), prob * law_y[y])
            else:
                accumulate(out, z + (int(y),), prob * law_y[y])

    node((), 1.0)
    return out


def correction_is_target(base: type) -> type:
    """Any verifier: after a rejection (tau < L) the extra token is redrawn from p at the
    accepted prefix of the emitted draft, dropping the residual. Biased whenever a residual
    differs from p, which every verifier's does on a generic pair."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class CorrectionIsTarget(base):
        lossless: ClassVar[bool] = False

        def __call__(self, key, drafts, q, p, state=()):
            verdict, state = super().__call__(key, drafts, q, p, state)
            tau, k, L = verdict.num_emitted - 1, verdict.draft_index, drafts.shape[1]
            redraw = sample(jax.random.fold_in(key, 11), p[k, jnp.minimum(tau, L)])
            extra = jnp.where(tau == L, verdict.tokens[L], redraw)
            return emit(drafts[k], tau, extra, k), state

    CorrectionIsTarget.__name__ = f"CorrectionIsTarget{base.__name__}"
    return CorrectionIsTarget


def cumprod_acceptance(drafts, q, p):
    """SpecTr-GBV's h in a naive form: joints by ``cumprod`` in linear space, divisions unguarded
    at t = L. Underflows at L = 12 with small token probabilities (h = 1, then NaN)."""
    from algorithms.verifiers.base import safe_ratio
    from algorithms.verifiers.spectr_gbv import one_minus_pow

    K, L = drafts.shape
    p_x = jnp.take_along_axis(p[:, :L], drafts[..., None], -1)[..., 0]
    q_x = jnp.take_along_axis(q, drafts[..., None], -1)[..., 0]
    ones = jnp.ones((K, 1), p.dtype)
    p_joint = jnp.concatenate([ones, jnp.cumprod(p_x, axis=1)], axis=1)
    q_joint = jnp.concatenate([ones, jnp.cumprod(q_x, axis=1)], axis=1)

    def accepted_mass(pz, qz):
        return pz * one_minus_pow(safe_ratio(qz, pz), K)

    cover = one_minus_pow(q_joint[:, 1:], K)
    own = accepted_mass(p_joint[:, 1:], q_joint[:, 1:])
    children = accepted_mass(p_joint[:, 1:L, None] * p[:, 1:L],
                             q_joint[:, 1:L, None] * q[:, 1:]).sum(-1)
    num, den = own[:, :L - 1] - children, cover[:, :L - 1] - children
    h_sub = jnp.where(den != 0, num / jnp.where(den != 0, den, 1.0), 1.0)
    return jnp.concatenate([h_sub, own[:, L - 1:] / cover[:, L - 1:]], axis=1)
