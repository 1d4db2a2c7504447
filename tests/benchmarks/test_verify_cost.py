"""Smoke test of the verify-cost benchmark on a tiny vocabulary (the real run is manual)."""

import jax
import numpy as np
import pytest

from benchmarks import verify_cost


def test_random_inputs_respect_the_verifier_contract():
    drafts, q, p = verify_cost.random_inputs(jax.random.key(0), K=3, L=2, V=50)
    assert drafts.shape == (3, 2) and q.shape == (3, 2, 50) and p.shape == (3, 3, 50)
    np.testing.assert_allclose(np.asarray(q.sum(-1)), 1.0, atol=1e-5)
    # Every draft starts at the same root, so the root laws must coincide.
    assert (np.asarray(p[:, 0]) == np.asarray(p[0, 0])).all()
    assert (np.asarray(q[:, 0]) == np.asarray(q[0, 0])).all()


def test_table_skips_single_draft_verifiers_above_k1(capsys):
    verify_cost.main(["--vocab", "64", "--K", "1", "2", "--L", "2", "--calls", "1",
                      "--verifiers", "token", "specinfer", "--tree-ms", "10"])
    out = capsys.readouterr().out
    token_row = next(line for line in out.splitlines() if line.startswith("| token"))
    assert "–" in token_row and "%" in token_row
    assert "| specinfer" in out
    assert "10 ms tree pass, given" in out


def test_default_tree_pass_is_the_measured_one(capsys, tmp_path):
    """Without --tree-ms the budget comes from the committed decode_speed 1.5B tree(4, 8) row,
    and --out writes the same table."""
    import json

    results = json.loads(verify_cost.DECODE_SPEED.read_text())
    row = next(r for r in results["rows"] if r["model"] == verify_cost.TREE_MODEL
               and r["pass_"] == "tree 4x8")
    out_file = tmp_path / "cost.md"
    verify_cost.main(["--vocab", "64", "--K", "1", "--L", "2", "--calls", "1",
                      "--verifiers", "token", "--out", str(out_file)])
    out = capsys.readouterr().out
    tree_ms = min(row[f"ms_{s}"] for s in results["settings"])
    assert f"{tree_ms:g} ms tree pass, {verify_cost.TREE_MODEL}" in out
    assert "| token |" in out_file.read_text()


def test_rejects_unknown_verifier():
    with pytest.raises(SystemExit):
        verify_cost.main(["--verifiers", "nope"])


def test_agree_inputs_are_one_block_with_shared_laws():
    """--mode agree: every draft carries the same tokens and q rows, and the drafted token is
    q's mode at every depth (the case where SpecTr keeps K survivors to the end)."""
    drafts, q, p = verify_cost.agree_inputs(jax.random.key(0), K=3, L=4, V=50)
    assert drafts.shape == (3, 4) and q.shape == (3, 4, 50) and p.shape == (3, 5, 50)
    assert (np.asarray(drafts) == np.asarray(drafts[0])).all()
    assert (np.asarray(q) == np.asarray(q[0])).all()
    assert (np.asarray(q[0]).argmax(-1) == np.asarray(drafts[0])).all()
    np.testing.assert_allclose(np.asarray(p.sum(-1)), 1.0, atol=1e-5)


def test_npz_round_trip_and_in_loop_table(tmp_path, capsys):
    """save_inputs -> --mode npz times the saved call (K, L, V from the file), also vmapped,
    beside random laws at the same shapes; a file with inconsistent shapes is refused."""
    path = tmp_path / "call.npz"
    verify_cost.save_inputs(path, *verify_cost.random_inputs(jax.random.key(1), K=2, L=3, V=40))
    drafts, q, p = verify_cost.load_inputs(path)  # one call: N = 1
    assert drafts.shape == (1, 2, 3) and q.shape == (1, 2, 3, 40) and p.shape == (1, 2, 4, 40)
    verify_cost.main(["--mode", "npz", "--inputs", str(path), "--in-loop", "--calls", "1",
                      "--verifiers", "token", "spectr", "--tree-ms", "10"])
    out = capsys.readouterr().out
    assert "V=40, K=2, L=3" in out and "batch of 1" in out
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in out.splitlines()
            if line.startswith("| token") or line.startswith("| spectr")}
    assert rows["token"][0].strip() == "1" and rows["spectr"][0].strip() == "2"  # token: draft 0
    assert all(c.count("%") == 1 for r in rows.values() for c in r[1:3])
    np.savez(tmp_path / "bad.npz", drafts=np.zeros((2, 3), np.int32),
             q=np.zeros((2, 3, 40), np.float32), p=np.zeros((2, 3, 40), np.float32))
    with pytest.raises(ValueError, match="do not fit"):
        verify_cost.load_inputs(tmp_path / "bad.npz")


def test_logits_rebuilt_from_recorded_laws_give_them_back():
    """T log p through the loop's transform at T is p again (zeros stay zero): the timed
    program with the transform sees the laws the verifier saw in the loop."""
    _, _, p = verify_cost.random_inputs(jax.random.key(2), K=2, L=3, V=50)
    p = p.at[0, 1, :7].set(0.0)
    p = p / p.sum(-1, keepdims=True)
    transform, logits = verify_cost.transform_inputs(p, 0.4)
    back = np.asarray(transform(logits))
    np.testing.assert_allclose(back, np.asarray(p), rtol=2e-5, atol=1e-7)
    assert (back[0, 1, :7] == 0).all()


def test_recorded_calls_are_the_loops_verifier_inputs(tmp_path, capsys):
    """The recorder leaves the decode unchanged (same tokens as the bare verifier), records one
    call per target call, each with the contract's shared root laws and normalised laws; the
    dump round-trips through --mode npz, which cycles through every recorded call."""
    import specjax
    from algorithms.verifiers import get_verifier
    from benchmarks import dump_verify_inputs
    from specjax.drafters import ModelDrafter
    from specjax.eval.recorder import InputRecorder, InputSink
    from specjax.models.toy import load_toy
    from specjax.prompts import load_prompts

    target, draft = load_toy("toy-target"), load_toy("toy-draft")
    text = load_prompts("toy")[0].text
    kw = dict(draft=draft, drafter=ModelDrafter(K=3, L=3), max_new_tokens=12, progress=False,
              sampling=specjax.Sampling(temperature=0.7), seed=3)
    sink = InputSink(limit=1000)
    bare = specjax.generate(target, [text], verifier=get_verifier("traversal"), **kw)
    rec = specjax.generate(target, [text], verifier=InputRecorder(get_verifier("traversal"),
                                                                  sink), **kw)
    assert rec.tokens == bare.tokens
    assert len(sink.calls) == rec.per_prompt[0]["target_calls"] > 1
    drafts, q, p = sink.stacked()
    assert drafts.shape[1:] == (3, 3) and q.shape[1:3] == (3, 3) and p.shape[2] == 4
    assert (q[:, :, 0] == q[:, :1, 0]).all() and (p[:, :, 0] == p[:, :1, 0]).all()
    np.testing.assert_allclose(q.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-5)
    assert (np.take_along_axis(q, drafts[..., None], -1) > 0).all()  # drafts drawn from q

    out = dump_verify_inputs.main(["--models", "toy", "--n", "2", "--calls", "3", "--L", "3",
                                   "--out", str(tmp_path / "d.npz")])
    seen = []
    real = verify_cost.time_verifier
    verify_cost.time_verifier = lambda v, d, *a, **k: seen.append(d.shape) or real(v, d, *a, **k)
    try:
        verify_cost.main(["--mode", "npz", "--inputs", str(out), "--calls", "3", "--verifiers",
                          "spectr", "--tree-ms", "10"])
    finally:
        verify_cost.time_verifier = real
    assert seen[0] == (3, 3, 3)  # all three recorded calls, K = 3, L = 3
    assert "3 calls recorded in the decode loop (toy-target / toy-draft, toy" in (
        capsys.readouterr().out)
    # as the loop runs it: the recorded temperature's transform in the verifier's program
    verify_cost.main(["--mode", "npz", "--inputs", str(out), "--calls", "2", "--in-loop",
                      "--verifiers", "spectr", "--tree-ms", "10"])
    text = capsys.readouterr().out
    assert "the sampling transform (T = 0.4) in one program" in text  # the dump's T
    row = next(line for line in text.splitlines() if line.startswith("| spectr"))
    assert "with the transform" in text and row.count("%") == 3
    with pytest.raises(SystemExit):
        verify_cost.main(["--mode", "npz"])
