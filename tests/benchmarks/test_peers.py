"""The pure parts of the peer benchmark (benchmarks/peers.py): output agreement, the
table's speed-up and equality columns, the GGUF type mix, and the greedy draft behind our
llama.cpp ``LlamaDraftModel`` adapter (driven here by a fake ``Llama``; llama-cpp-python is not
needed)."""

import numpy as np
import pytest

from benchmarks import peers


def test_agreement_counts_equal_prompts_and_first_differences():
    ref = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    same, first = peers.agreement([[1, 2, 3], [4, 0, 6], [7, 8]], ref)
    assert same == 1
    # identical: its length; a changed token: its index; a shorter output equal so far: its end
    assert first == [3, 1, 2]
    with pytest.raises(ValueError):
        peers.agreement([[1]], ref)  # one output per prompt, or the count would be wrong


def row(engine, method, tokens, seconds, per_call=1.0):
    return dict(engine=engine, method=method, tokens=tokens,
                new_tokens=sum(map(len, tokens)), seconds=seconds, per_call=per_call)


def cells(text, engine, method):
    line = next(x for x in text.splitlines() if x.startswith(f"| {engine} | {method} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_table_speedups_and_equality_with_specjax_fp32():
    spec = [[1, 2, 3, 4], [5, 6, 7, 8]]  # 8 tokens
    rows = [row("specjax (JAX, fp32)", "AR", spec, 2.0),
            row("HF transformers (torch CPU, fp32)", "AR", spec, 8.0),
            row("llama.cpp (F32)", "AR", [[1, 2, 3, 4], [5, 6, 0, 8]], 1.0),
            row("llama.cpp (F32)", "prompt lookup", [[1, 2, 3, 4], [5, 6, 0, 8]], 0.5, 2.5),
            row("llama.cpp (F32)", "SD", [[1, 2, 3, 4], [5, 6, 7, 1]], 0.8, 3.0)]
    text = peers.table(rows, ["llama.cpp (Q8_0): RuntimeError: x"], "# head",
                       ["- llama.cpp (F32): target t.gguf"])
    # engine, method, tokens/s, vs own AR, vs HF AR, tokens/call, = own AR, = specjax fp32 AR
    assert cells(text, "specjax (JAX, fp32)", "AR")[2:] == [
        "4.00", "1.00x", "4.00x", "1.00", "-", "-"]
    assert cells(text, "llama.cpp (F32)", "AR")[2:] == [
        "8.00", "1.00x", "8.00x", "1.00", "-", "1/2"]
    assert cells(text, "llama.cpp (F32)", "prompt lookup")[2:] == [
        "16.00", "2.00x", "16.00x", "2.50", "yes", "1/2"]
    assert cells(text, "llama.cpp (F32)", "SD")[2:] == [
        "10.00", "1.25x", "10.00x", "3.00", "NO", "1/2"]
    assert ("llama.cpp (F32) and specjax (JAX, fp32) greedy AR outputs identical on 1/2 "
            "prompts; first difference at tokens [4, 2]") in text
    assert "- llama.cpp (F32): target t.gguf" in text
    assert "- skipped: llama.cpp (Q8_0): RuntimeError: x" in text


def test_table_states_specjax_ar_over_llamacpp_ar_at_the_same_precision():
    rows = [row("specjax (JAX, fp32)", "AR", [[1, 2, 3, 4]], 2.0),
            row("specjax (JAX, int8)", "AR", [[1, 2, 3, 4]], 1.0),
            row("llama.cpp (F32)", "AR", [[1, 2, 3, 4]], 1.0),
            row("llama.cpp (Q8_0)", "AR", [[1, 2, 3, 4]], 0.8)]
    text = peers.table(rows, [], "#")
    assert "specjax (JAX, fp32) AR / llama.cpp (F32) AR tokens/s: 0.50x" in text
    assert "specjax (JAX, int8) AR / llama.cpp (Q8_0) AR tokens/s: 0.80x" in text
    # without the Q8_0 row there is no int8 ratio to state
    assert "llama.cpp (Q8_0) AR tokens/s" not in peers.table(rows[:3], [], "#")


def test_isolated_runs_in_another_process_and_passes_errors_back():
    import os

    assert peers.isolated(os.getpid) != os.getpid()
    with pytest.raises(ZeroDivisionError):
        peers.isolated(divmod, 1, 0)


def test_table_without_hf_or_specjax_says_so():
    rows = [row("llama.cpp (as-shipped)", "AR", [[1, 2]], 1.0)]
    assert cells(peers.table(rows, [], "#"), "llama.cpp (as-shipped)", "AR")[4:] == [
        "-", "1.00", "-", "-"]


def test_type_mix_is_shares_of_elements_largest_first():
    mix = peers.type_mix([("Q4_K", 300), ("F32", 10), ("Q6_K", 90), ("Q4_K", 600)])
    assert mix == "Q4_K 90.0 %, Q6_K 9.0 %, F32 1.0 %"


class FakeLlama:
    """``generate`` yields 100, 101, ... after the ids it was given, and records them."""

    def __init__(self):
        self.calls, self.closed = [], 0

    def generate(self, tokens, **sampling):
        self.calls.append((tokens, sampling))
        try:
            token = 100
            while True:
                yield token
                token += 1
        finally:
            self.closed += 1


def test_greedy_draft_takes_n_greedy_tokens_and_closes_the_stream():
    draft = FakeLlama()
    out = peers.greedy_draft(draft, np.array([7, 8, 9], dtype=np.intc), 4)
    assert out.dtype == np.intc and out.tolist() == [100, 101, 102, 103]
    tokens, sampling = draft.calls[0]
    assert tokens == [7, 8, 9] and all(type(t) is int for t in tokens)
    assert sampling["temp"] == 0.0  # llama.cpp's greedy sampler
    assert draft.closed == 1  # no generator is left suspended on the draft's context
