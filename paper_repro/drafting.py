"""Cheaper drafting, still exact: draft weights, draft vocabulary and draft length at batch 1.

    python -m paper_repro.drafting --preset cpu     # the README main command's pair and prompts
    python -m paper_repro.drafting --preset tiny    # the toy pair, seconds (what the tests run)

The target stays float32; only the draft changes, and every row is exact because the verifier
sees the q the draft sampled from. Rows: AR, then token-wise SD with the float32 0.5B draft at
L = 4 (the main command's old setup), the int8 draft at L = 4 and 6, and each with the draft's
vocabulary cut to the first 32,768 ids + EOS (``ModelDrafter(draft_vocab=...)``), and the int8
draft at L = 6 with the loop's fallback to autoregressive steps (``specjax.decode.fallback``,
``break_even=auto``). Same latency
method as Table 1: batch 1, interleaved timing repeats, SR intervals over prompts and repeats
(``paper_repro.table1``). This table is how the main command's setup was chosen.
"""

from __future__ import annotations

from paper_repro.cells import Method, Setting
from paper_repro.table1 import run_table

CUT = 32_768
PRESETS: dict[str, Setting] = {
    "tiny": Setting(models="toy", datasets=("humaneval",), n=4, max_new_tokens=24, K=1, L=4,
                    temperature=1.0, batch_size=1, fast_compile=True, repeats=2),
    "cpu": Setting(models="qwen-coder", datasets=("humaneval",), n=8, max_new_tokens=64, K=1,
                   L=4, temperature=1.0, batch_size=1, repeats=3, breakdown=True),
}


def methods(setting: Setting) -> list[Method]:
    cut = 2 if setting.toy else CUT  # the toy vocabulary has 4 ids
    int8 = None if setting.toy else "int8"  # the toys are float tables: no int8 copy
    tag = "int8" if int8 else "float"
    return [
        Method(None),
        Method("token", L=4, label="sd_L4_float32"),
        Method("token", L=4, draft_weights=int8, label=f"sd_L4_{tag}"),
        Method("token", L=6, draft_weights=int8, label=f"sd_L6_{tag}"),
        Method("token", L=4, draft_weights=int8, draft_vocab=cut, label=f"sd_L4_{tag}_cut"),
        Method("token", L=6, draft_weights=int8, draft_vocab=cut, label=f"sd_L6_{tag}_cut"),
        Method("token", L=6, draft_weights=int8, break_even="auto", label=f"sd_L6_{tag}_fallback"),
    ]


def main(argv=None) -> dict:
    return run_table("drafting", "Cheaper drafting at batch 1: int8 draft, draft vocabulary "
                     "cut, draft length (target float32)", argv, PRESETS, methods, paper=False)


if __name__ == "__main__":
    main()
