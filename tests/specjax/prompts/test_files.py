"""Prompts from a JSON-lines file (``dataset=file``): both line forms, the category filter, and
one error per malformed line naming its number."""

from __future__ import annotations

import json

import pytest

from specjax.prompts import PromptSuite, load_prompts

SPEC_BENCH = [
    {"question_id": 81, "category": "writing", "turns": ["Compose a blog post.", "Rewrite it."]},
    {"question_id": 82, "category": "qa", "turns": ["Who wrote Hamlet?"]},
    {"question_id": 83, "category": "summarization", "turns": ["Summarize: a b c."]},
]


def write(tmp_path, rows, name="q.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_spec_bench_lines_give_the_first_turn_their_ids_and_categories(tmp_path):
    prompts = load_prompts("file", path=write(tmp_path, SPEC_BENCH))
    assert [p.text for p in prompts] == ["Compose a blog post.", "Who wrote Hamlet?",
                                         "Summarize: a b c."]
    assert [p.id for p in prompts] == ["81", "82", "83"]
    assert [p.category for p in prompts] == ["writing", "qa", "summarization"]


def test_a_text_field_per_line_named_by_field(tmp_path):
    path = write(tmp_path, [{"prompt": "one"}, "", {"prompt": "two"}])  # blank lines skipped
    assert [(p.id, p.text) for p in load_prompts("file", path=path)] == [("file/1", "one"),
                                                                         ("file/3", "two")]
    path = write(tmp_path, [{"instruction": "x"}, {"instruction": "y"}], "i.jsonl")
    assert [p.text for p in load_prompts("file", path=path, field="instruction")] == ["x", "y"]


def test_category_filter_and_n_and_shuffle(tmp_path):
    path = write(tmp_path, SPEC_BENCH)
    assert [p.id for p in load_prompts("file", path=path, category="qa,writing")] == ["81", "82"]
    assert [p.id for p in load_prompts("file", path=path, category=["qa"])] == ["82"]  # Hydra's
    assert len(PromptSuite(suite="file", path=path, n=2).load()) == 2
    shuffled = PromptSuite(suite="file", path=path, shuffle=True, seed=3).load()
    assert sorted(p.id for p in shuffled) == ["81", "82", "83"]
    with pytest.raises(ValueError, match=r"dataset.category: no prompt .* in \['math'\]; its "
                                         r"categories: qa, summarization, writing"):
        load_prompts("file", path=path, category="math")


@pytest.mark.parametrize("line, match", [
    ("{not json", "line 2: not valid JSON"),
    ("[1, 2]", "line 2: each line must be a JSON object, got list"),
    ('{"turns": []}', "line 2: 'turns' must be a non-empty list of strings"),
    ('{"turns": [3]}', "line 2: 'turns' must be a non-empty list of strings"),
    ('{"text": "no prompt field"}', "line 2: no 'turns' .* and no 'prompt' field .* its "
                                    "fields: text"),
    ('{"prompt": 7}', "line 2: 'prompt' must be a string, got int"),
    ('{"prompt": "  "}', "line 2: the prompt text is empty"),
])
def test_a_malformed_line_is_refused_with_its_number(tmp_path, line, match):
    path = write(tmp_path, [{"prompt": "fine"}, line])
    with pytest.raises(ValueError, match=f"dataset.path: .*q.jsonl {match}"):
        load_prompts("file", path=path)


def test_missing_and_misplaced_fields(tmp_path):
    with pytest.raises(ValueError, match="dataset.path: dataset=file needs"):
        load_prompts("file")
    with pytest.raises(ValueError, match="dataset.path: no such file"):
        load_prompts("file", path=str(tmp_path / "nope.jsonl"))
    for name, value in (("path", "q.jsonl"), ("field", "text"), ("category", "qa")):
        with pytest.raises(ValueError, match=f"dataset.{name}: applies to dataset=file"):
            PromptSuite(suite="humaneval", **{name: value})
