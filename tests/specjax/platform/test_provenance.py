import subprocess

from specjax.platform.provenance import RESULTS, commit


def _git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_commit_marks_code_edits_dirty_but_not_result_files(tmp_path):
    (tmp_path / RESULTS).mkdir(parents=True)
    code, result = tmp_path / "code.py", tmp_path / RESULTS / "cells.jsonl"
    code.write_text("x = 1\n")
    result.write_text("{}\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    head = commit(tmp_path)
    assert len(head) == 12 and "+" not in head
    result.write_text('{"a": 1}\n')  # a run rewrote a tracked result file: still clean
    assert commit(tmp_path) == head
    code.write_text("x = 2\n")  # a code edit: dirty
    assert commit(tmp_path) == head + "+dirty"


def test_commit_outside_a_checkout_is_unknown(tmp_path):
    assert commit(tmp_path) == "unknown"
