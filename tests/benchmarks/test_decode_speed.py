"""The roofline arithmetic of the decode-speed table, on hand-computed numbers."""

from benchmarks.decode_speed import render, tokens_of


def test_tokens_of_each_pass_kind():
    assert [tokens_of(p) for p in ("decode", "tree 4x8", "prefill 128", "decode B=16")] == [
        1, 33, 128, 16]


def test_roofline_is_the_slower_of_reading_the_weights_and_doing_the_flops():
    # 1e9 params: 4 GB / 40 GB/s = 100 ms to read; 2e9 * 9 tokens / 100 GFLOP/s = 180 ms. At the
    # 25 GB/s read ceiling, 160 ms to read: still compute-bound (180 ms); decode: 160 ms.
    timing = dict(model="m", params=10**9, pass_="tree 1x8", ms_default=200.0, ms_eigen=360.0,
                  ms_matmuls=150.0)
    rows, (rec, _) = render([timing, {**timing, "pass_": "decode", "ms_matmuls": None}],
                          ["default", "eigen"], bw=40.0, flops=100e9, read_bw=25.0)
    assert rec["bound"] == "compute" and abs(rec["roofline_ms"] - 180.0) < 1e-9
    assert rec["best"] == "default" and abs(rec["ratio"] - 0.9) < 1e-12
    assert abs(rec["matmuls_ratio"] - 0.75) < 1e-12 and abs(rec["read_ratio"] - 0.9) < 1e-12
    assert rows[0].endswith("| 180.0 (compute) | 0.90 | 0.90 | 150.0 | 0.75 |")
    # decode: one token, so reading the weights (100 ms) bounds it; no matmuls-alone timing
    assert rows[1].endswith("| 100.0 (bandwidth) | 0.50 | 0.80 | - | - |")


def test_an_int8_row_is_judged_against_its_own_bytes():
    # 1e9 params at 1 byte: 1 GB / 40 GB/s = 25 ms to read; 2e9 FLOPs / 100 GFLOP/s = 20 ms;
    # 1 GB at the 25 GB/s read ceiling: 40 ms.
    timing = dict(model="m (int8)", params=10**9, bytes_per_param=1, pass_="decode",
                  ms_default=50.0)
    _, (rec,) = render([timing], ["default"], bw=40.0, flops=100e9, read_bw=25.0)
    assert rec["bound"] == "bandwidth" and abs(rec["roofline_ms"] - 25.0) < 1e-9
    assert abs(rec["ratio"] - 0.5) < 1e-12 and abs(rec["read_ratio"] - 0.8) < 1e-12
