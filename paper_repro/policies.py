"""Dynamic drafting policies against fixed settings, at batch 1 (the latency method of Table 1).

    python -m paper_repro.policies --preset cpu     # the main command's pair, HumanEval + MT-Bench
    python -m paper_repro.policies --preset tiny    # the toy pair, seconds (what the tests run)

Rows: AR; token-wise SD with the int8 0.5B draft at fixed L = 4 and L = 6 (L = 6 is the main
command's setup); the adaptive draft length (``specjax.drafters.adaptive``: draft up to L = 8,
stop once the draft's probability of its last token is below the threshold) at two thresholds;
multi-draft SpecInfer with K = 3 drafts of fixed L = 6, and the dynamic tree
(``specjax.drafters.dynamic_tree``: K = 3 paths of up to L = 8, each grown while the product of
the draft's probabilities along it stays above 0.1), both verified by SpecInfer's RRS;
L = 6 with the loop's fallback to autoregressive steps (``specjax.decode.fallback``, its
break-even measured per cell by ``specjax.tuning.break_even``).
Every row is exact: the verifier sees the q the draft sampled from, and the stop rule reads only
the draft's own laws. Same latency method as Table 1 (``paper_repro.table1``): each prompt alone,
interleaved timing repeats, SR intervals over prompts and repeats.
"""

from __future__ import annotations

from paper_repro.cells import Method, Setting
from paper_repro.table1 import run_table

PRESETS: dict[str, Setting] = {
    "tiny": Setting(models="toy", datasets=("humaneval",), n=4, max_new_tokens=24, K=1, L=4,
                    temperature=1.0, batch_size=1, fast_compile=True, repeats=2),
    "cpu": Setting(models="qwen-coder", datasets=("humaneval", "mt_bench"), n=3,
                   max_new_tokens=64, K=1, L=4, temperature=1.0, batch_size=1, repeats=3),
    # The main command's setup on 8 prompts, for the fallback rows (issue: SD >= 0.97x AR on
    # MT-Bench): --preset cpu8 --methods ar,sd_L6,sd_L6_fallback
    "cpu8": Setting(models="qwen-coder", datasets=("mt_bench", "humaneval"), n=8,
                    max_new_tokens=64, K=1, L=6, temperature=1.0, batch_size=1, repeats=3),
}


def methods(setting: Setting) -> list[Method]:
    int8 = None if setting.toy else "int8"  # the toys are float tables: no int8 copy
    return [
        Method(None),
        Method("token", L=4, draft_weights=int8, label="sd_L4"),
        Method("token", L=6, draft_weights=int8, label="sd_L6"),
        Method("token", L=8, draft_weights=int8, threshold=0.5, label="adaptive_L8_t0.5"),
        Method("token", L=8, draft_weights=int8, threshold=0.3, label="adaptive_L8_t0.3"),
        Method("specinfer", K=3, L=6, draft_weights=int8, label="specinfer_K3_L6"),
        Method("specinfer", K=3, L=8, draft_weights=int8, threshold=0.1, drafter="dynamic_tree",
               label="tree_K3_L8_t0.1"),
        Method("token", L=6, draft_weights=int8, break_even="auto", label="sd_L6_fallback"),
    ]


def main(argv=None) -> dict:
    return run_table("policies", "Dynamic drafting policies at batch 1: adaptive draft length "
                     "vs fixed L, dynamic tree vs fixed K x L (target float32, int8 draft)",
                     argv, PRESETS, methods, paper=False)


if __name__ == "__main__":
    main()
