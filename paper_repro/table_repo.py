"""The official SpecTr-GBV repository's setting as its own table.

    python -m paper_repro.table_repo --preset cpu    # first 8 HumanEval prompts (CPU budget)
    python -m paper_repro.table_repo --preset full   # the repo's first 32 prompts, on a GPU

The repository's setting: the first 32 HumanEval prompts, 64 new tokens, T = 0.7, K = 7, L = 6.
Same rows, statistics, CIs, lossless column and gap to the optimum as Table 1
(``paper_repro.table1``, whose code this reuses); one dataset, so nothing is pooled. The ``cpu``
preset keeps the setting but takes the first 8 of the 32 prompts: K = 7 drafts of 6 tokens make a
43-node tree per prompt, which this 2-core CPU scores at ~1/10 of the GPU's pace. Outputs:
``<out>/table_repo_<preset>.md`` / ``.json``, cells in ``<out>/runs/table_repo_<preset>/``.
"""

from __future__ import annotations

from paper_repro.cells import Setting, table1_methods
from paper_repro.table1 import run_table

REPO_SETTING = dict(K=7, L=6, temperature=0.7, max_new_tokens=64)
PRESETS: dict[str, Setting] = {
    "tiny": Setting(models="toy", datasets=("humaneval",), n=8, batch_size=1,
                    fast_compile=True, repeats=2, **REPO_SETTING),
    "cpu": Setting(models="qwen-coder", datasets=("humaneval",), n=8, batch_size=1, repeats=3,
                   breakdown=True, **REPO_SETTING),
    "full": Setting(models="qwen-coder", datasets=("humaneval",), n=32, batch_size=1,
                    repeats=3, breakdown=True, **REPO_SETTING),
}


def main(argv=None) -> dict:
    return run_table("table_repo", "The official repository's setting: HumanEval, K = 7, L = 6, "
                     "T = 0.7, 64 tokens", argv, PRESETS, lambda s: table1_methods(s.K),
                     paper=False)


if __name__ == "__main__":
    main()
