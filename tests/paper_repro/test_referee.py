"""The referee: which rules it judges, its verdict threshold, its optimum guard, and its
counterexample search, each against hand-worked laws."""

from fractions import Fraction
from pathlib import Path

import pytest

from algorithms.exact import example_pair, random_pair
from algorithms.verifiers import list_verifiers, verifier_class
from paper_repro import referee as rf

HALF, THIRDS, TWO_THIRDS = (Fraction(1, 2),) * 2, (Fraction(1, 3), Fraction(2, 3)), (
    Fraction(2, 3), Fraction(1, 3))
SMALL = {"example": example_pair(), "random seed 0": random_pair(3, 0)}


def test_rows_are_every_engine_rule_then_the_iid_references():
    names = rf.rules()
    engine = {n for n in list_verifiers() if hasattr(verifier_class(n), "referee_drafts")}
    assert set(names) == engine | {"token", "specinfer", "traversal", "block"}
    assert names[-4:] == ["token", "specinfer", "traversal", "block"]
    assert "spectr" not in names and "hsd" not in names  # i.i.d. verifiers outside the brief


def test_draft_counts_follow_the_structure():
    """A chain takes K = 1; top-k needs K distinct roots (K <= V); i.i.d. multi-draft up to 3."""
    assert rf.draft_counts("traversal", 2) == (1, 2, 3)
    assert rf.draft_counts("block", 3) == (1,)
    for name in rf.rules():
        s = rf.structure(name)
        if s == "argmax":
            assert rf.draft_counts(name, 3) == (1,)
        if s == "topk":
            assert max(rf.draft_counts(name, 2)) <= 2


@pytest.mark.parametrize("tv, expected", [(0.0, "lossless"), (3e-16, "lossless"),
                                          (1e-12, "lossless"), (2e-12, "biased"),
                                          (1e-3, "biased")])
def test_verdict_threshold(tv, expected):
    assert rf.verdict(tv) == expected


def test_alpha_star_of_each_structure_by_hand():
    """Example p = (1/3, 2/3), q = (2/3, 1/3). i.i.d. K = 1: sum min(p, q) = 2/3; K = 2: b is
    carried w.p. 5/9 < 2/3, so 1 - 1/9. Argmax chain: root a, p(a) = 1/3. Top-2: both roots."""
    P, Q = example_pair()
    assert rf.alpha_star(P, Q, 2, 1, "iid") == pytest.approx(2 / 3, abs=1e-12)
    assert rf.alpha_star(P, Q, 2, 2, "iid") == pytest.approx(8 / 9, abs=1e-12)
    assert rf.alpha_star(P, Q, 2, 1, "argmax") == pytest.approx(1 / 3, abs=1e-12)
    assert rf.alpha_star(P, Q, 2, 2, "topk") == pytest.approx(1.0, abs=1e-12)


def test_known_verdicts_and_the_running_example():
    """Block verification is lossless and reaches its LP optimum (11/9 on the example at L = 2,
    Sun et al.); the greedy-path rule emits argmax p = b twice on the example: never a draft of
    the argmax chain aa, so E[tau] = 0."""
    block = rf.referee("block", SMALL)
    assert block["verdict"] == "lossless" and block["tv"] < 1e-14
    assert block["example_tau"] == pytest.approx(11 / 9, abs=1e-12)
    assert block["example_lp"] == pytest.approx(11 / 9, abs=1e-9)
    strict = rf.referee("vllm_strict", SMALL)
    assert strict["verdict"] == "biased"
    assert strict["example_tau"] == pytest.approx(0.0, abs=1e-12)


def test_every_lossless_rule_stays_at_or_below_its_optimum():
    rows = [rf.referee(name, SMALL) for name in rf.rules()]
    lossless = [r for r in rows if r["verdict"] == "lossless"]
    assert {"token", "block", "specinfer", "traversal"} <= {r["rule"] for r in lossless}
    for r in lossless:
        assert r["example_tau"] <= r["example_lp"] + 1e-9, r["rule"]
        assert r["worst_of_lp"] <= 1 + 1e-9, r["rule"]


def test_a_lossless_rule_above_the_optimum_stops_the_run():
    """The guard that makes the table trustworthy: shrink the optimum and it must fire."""
    with pytest.raises(AssertionError, match="LP optimum"):
        rf.referee("token", {"example": example_pair()}, lp_fn=lambda *a: 0.1)


def test_counterexample_for_the_greedy_path_rule_by_hand():
    """p = q = (1/2, 1/2), L = 1: argmax p = a (lower id) is emitted, then a bonus argmax p = a:
    'aa' with probability 1 against 1/4, TV = 3/4. The simplest law already shows it."""
    c = rf.counterexample("vllm_strict", {2: [HALF]})
    assert (c["V"], c["L"], c["K"]) == (2, 1, 1)
    assert c["tv"] == pytest.approx(3 / 4, abs=1e-12)
    assert c["string"] == "aa" and c["rule_prob"] == pytest.approx(1.0)
    assert "= 3/4" in c["tv_text"] and c["drafts"] == "a"


def test_counterexample_picks_the_largest_tv_at_the_smallest_size():
    """Argmax drafts with the softmax q, L = 1, over p, q in {(1/3, 2/3), (2/3, 1/3), (1/2, 1/2)}.
    Worked by hand: the first pair p = q = (1/3, 2/3) drafts b, accepts it always, TV = p(a) =
    1/3; p = (1/3, 2/3), q = (2/3, 1/3) gives 7/36; p = q = (1/2, 1/2) drafts a (tie, lower id),
    accepts it always: 'aa', 'ab' 1/2 each against 1/4, TV = 1/2, the largest of the 9 pairs.
    A search that stopped at the first biased pair would report 1/3."""
    c = rf.counterexample("vllm_argmax_softmax", {2: [THIRDS, TWO_THIRDS, HALF]})
    assert c["tv"] == pytest.approx(1 / 2, abs=1e-12)
    assert c["p"] == c["q"] == "(1/2, 1/2)"
    assert c["tau"] == pytest.approx(1.0) and c["lp"] == pytest.approx(1 / 2, abs=1e-9)
    first = rf.counterexample("vllm_argmax_softmax", {2: [THIRDS]})
    assert first["tv"] == pytest.approx(1 / 3, abs=1e-12)
    mixed = rf.counterexample("vllm_argmax_softmax", {2: [TWO_THIRDS]})  # p = q = (2/3, 1/3)
    assert mixed["tv"] == pytest.approx(1 / 3, abs=1e-12)


def test_a_lossless_rule_has_no_counterexample():
    assert rf.counterexample("token", {2: [THIRDS, HALF]}) is None


def test_markdown_states_provenance_and_marks_disagreements():
    rows = [rf.referee("token", SMALL), rf.referee("vllm_strict", SMALL)]
    rows[0] = dict(rows[0], claims_lossless=False)  # a flag the checker contradicts
    md = rf.markdown(rows, {"vllm_strict": rf.counterexample("vllm_strict", {2: [HALF]})},
                     1.0, [])
    assert "do not edit by hand" in md and "**Commit:**" in md and "**Machine:**" in md
    assert "`python -m paper_repro.referee`" in md
    assert md.count("**disagrees**") == 1
    assert "p = (1/2, 1/2), q = (1/2, 1/2)" in md


def test_committed_table_has_a_row_for_every_rule():
    """Regenerate (python -m paper_repro.referee) when a rule is registered or renamed."""
    text = (Path(rf.__file__).parent / "results" / "referee.md").read_text()
    table = text.split("| rule |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    rows = {line.split("|")[1].split("(")[0].strip() for line in table}
    assert rows == set(rf.rules())
