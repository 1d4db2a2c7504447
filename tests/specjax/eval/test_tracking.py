"""Trackers: one interface, three backends; W&B stays offline unless WANDB_MODE says otherwise."""

from __future__ import annotations

import json

import pytest

from specjax.eval.tracking import JsonlTracker, NoneTracker, WandbTracker

CONFIG = {"drafter": {"K": 1, "L": 4}, "verifier": "token"}
ROWS = [{"id": "a", "new_tokens": 3, "per_position": [1, 0]}, {"id": "b", "new_tokens": 5,
                                                              "per_position": [2, 1]}]


def _drive(tracker, run_dir):
    tracker.start(run_dir, name="t", config=CONFIG)
    tracker.log_table("prompts", ROWS)
    tracker.log_summary({"block_efficiency": 2.5})
    tracker.finish()


def test_jsonl_tracker_writes_one_event_per_call(tmp_path):
    _drive(JsonlTracker(), tmp_path)
    events = [json.loads(line) for line in (tmp_path / "tracker.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["config", "table", "summary"]
    assert events[0]["config"] == CONFIG
    assert events[1]["rows"] == ROWS
    assert events[2]["metrics"] == {"block_efficiency": 2.5}


def test_jsonl_tracker_refuses_to_log_before_start():
    with pytest.raises(RuntimeError, match="start"):
        JsonlTracker().log_summary({"x": 1})


def test_none_tracker_writes_nothing(tmp_path):
    _drive(NoneTracker(), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_construction_has_no_side_effects(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    WandbTracker()
    JsonlTracker()
    assert list(tmp_path.iterdir()) == []


def test_wandb_defaults_to_offline_and_writes_a_local_run(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    _drive(WandbTracker(project="specjax-test"), tmp_path)
    import os

    assert os.environ["WANDB_MODE"] == "offline"
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].glob("*.wandb"))


def test_wandb_respects_the_users_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    _drive(WandbTracker(project="specjax-test", mode="offline"), tmp_path)
    assert not (tmp_path / "wandb").exists() or not list((tmp_path / "wandb").glob("offline-*"))
