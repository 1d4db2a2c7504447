"""benchmarks.prefill_speed: the instruction-peak probe and the table's arithmetic."""

import os

from benchmarks.prefill_speed import instruction_peaks, render


def test_instruction_peaks_measure_the_float32_fma():
    peaks = instruction_peaks()
    # a register-only FMA chain does at least 8 GFLOP/s per core on any AVX2 CPU
    assert peaks["float32_fma"] > 8 * (os.cpu_count() or 1) * 0.25
    if "int8_vpdpbusd" in peaks:  # 64 multiply-adds per instruction against 16 for float32
        assert peaks["int8_vpdpbusd"] > 2 * peaks["float32_fma"]


def test_render_labels_int8_rows_and_divides_by_the_float32_prefill():
    common = dict(model="m", tokens=8, matmuls_s=1.0, attention_s=0.5, floor_s=1.0,
                  matmul_floor_s=0.8, attention_floor_s=0.2)
    text = render([dict(common, weights="float32", activations="float32", prefill_s=4.0),
                   dict(common, weights="int8", activations="int8", prefill_s=2.0)])
    rows = text.splitlines()[2:]
    assert "| int8 (int8 rows) |" in rows[1]
    cells = [c.strip() for c in rows[1].split("|")[1:-1]]
    assert cells[-1] == "0.50"  # 2.0 / 4.0
    assert cells[5] == "0.50"  # floor 1.0 over prefill 2.0
    assert cells[7] == "0.80"  # matmul floor 0.8 over matmuls alone 1.0


def test_the_ratio_divides_by_the_float32_rows_prefill_not_bfloat16_rows():
    common = dict(model="m", tokens=8, matmuls_s=1.0, attention_s=0.5, floor_s=1.0,
                  matmul_floor_s=0.8, attention_floor_s=0.2)
    text = render([dict(common, weights="float32", activations="float32", prefill_s=4.0),
                   dict(common, weights="float32", activations="bfloat16", prefill_s=2.0),
                   dict(common, weights="int8", activations="int8", prefill_s=1.0)])
    rows = [[c.strip() for c in row.split("|")[1:-1]] for row in text.splitlines()[2:]]
    assert rows[1][1] == "float32 (bfloat16 rows)" and rows[1][-1] == "0.50"
    assert rows[2][-1] == "0.25"  # 1.0 / 4.0, not / 2.0
