"""The deterministic draft builders the engine rules are refereed on."""

import numpy as np
import pytest

from algorithms.exact.engine_drafts import argmax_chain, draft_rows, referee_drafts, topk_paths
from algorithms.exact.models import ConstantModel, DirichletModel, ToyModel


class Table(ToyModel):
    """Hand-written laws: the root and one level below, for checking ties and continuations."""

    def law(self, ctx):
        rows = {(): (0.2, 0.4, 0.4), (1,): (0.5, 0.1, 0.4), (2,): (0.3, 0.3, 0.4),
                (0,): (0.1, 0.1, 0.8)}
        return rows.get(ctx, (1 / 3, 1 / 3, 1 / 3))


def test_argmax_chain_breaks_ties_by_the_lower_id():
    Q = Table(3)
    assert argmax_chain(Q, (), 1) == (1,)  # 0.4 at ids 1 and 2: the lower id
    assert argmax_chain(Q, (), 2) == (1, 0)
    assert argmax_chain(Q, (), 3) == (1, 0, 0)  # uniform after (1, 0): id 0


def test_topk_paths_are_the_k_top_roots_continued_greedily():
    Q = Table(3)
    assert topk_paths(Q, (), 2, 3) == ((1, 0), (2, 2), (0, 2))
    assert topk_paths(Q, (), 2, 1) == (argmax_chain(Q, (), 2),)  # K = 1 is the argmax chain
    assert topk_paths(Q, (), 1, 2) == ((1,), (2,))
    with pytest.raises(ValueError, match="K <= V"):
        topk_paths(Q, (), 2, 4)


def test_topk_root_keeps_zero_probability_tokens_in_id_order():
    Q = ConstantModel(4, (0.0, 1.0, 0.0, 0.0))
    assert topk_paths(Q, (), 2, 3) == ((1, 1), (0, 1), (2, 1))


def test_referee_drafts_and_rows():
    Q = DirichletModel(4, 3)
    assert referee_drafts("argmax", Q, (2,), 3, 1) == (argmax_chain(Q, (2,), 3),)
    assert referee_drafts("topk", Q, (), 2, 3) == topk_paths(Q, (), 2, 3)
    with pytest.raises(ValueError, match="K = 1"):
        referee_drafts("argmax", Q, (), 2, 2)
    with pytest.raises(ValueError, match="not deterministic"):
        referee_drafts("iid", Q, (), 2, 1)
    drafts = topk_paths(Q, (), 2, 2)
    rows = draft_rows(Q, (), drafts, extra=True)
    assert rows.shape == (2, 3, 4)
    np.testing.assert_array_equal(rows[1, 2], Q(drafts[1]))
    # drafts are a function of Q and the context only: the same call gives the same set
    assert topk_paths(Q, (1,), 2, 2) == topk_paths(Q, (1,), 2, 2)
