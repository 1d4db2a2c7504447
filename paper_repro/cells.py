"""Measured cells of the paper tables: one (dataset, method) run each, stored so runs resume.

A *setting* is what every method of a table shares (model pair, prompts, K, L, T, tokens per
prompt, batch size, seed). A *cell* is one method decoded on one dataset's prompts under that
setting with ``specjax.generate``: the same prompt list and the same seed for every method, so
prompt i decodes with the key ``fold_in(key(seed), i)`` whatever the method (``specjax.api``).
The autoregressive cell of a dataset is measured in the same session as its speculative cells
(the table marks any cell that came from another session, e.g. after a resume).

Per prompt a cell keeps the counters BE, SR and the gap to optimum are built from: generated
tokens, target calls (loop steps), accepted draft tokens, acceptance at every draft position
(``accepted_per_position``), steps whose first draft token was accepted and the sum of the
step-wise optimal acceptance alpha* (``specjax.eval.root_bound.RootBoundProbe``), and the fewest
target calls its tokens allow (ceil(tokens / (L + 1)): a prompt at that ceiling says nothing
about how much longer the drafts could have been).

Regimes. ``batch_size=1`` is the latency setting of the speculative-decoding papers: each
prompt decodes alone and its seconds are its own measured time. Any other batch size is the
throughput setting: a batch decodes in one jitted call that runs until its slowest row ends, so
each prompt gets the batch's wall time in proportion to its loop steps; tables label that
regime and never put it in an SR column. Wall time excludes compilation (stored separately).

Timing repeats. With ``repeats = R`` every (dataset, method) cell is timed R times, interleaved:
repeat r of every method of a dataset runs before repeat r + 1 of any (AR, m1, m2, ..., AR, m1,
m2, ...), so a slow spell of the machine lands on all methods alike, and the spread between
repeats is kept per prompt (``seconds_by_repeat``) for the SR intervals. The tokens of a repeat
must equal the first repeat's (same seed, same code path); a mismatch stops the run.

Storage: ``<out>/runs/<table>_<preset>/cells.jsonl``, one JSON line per cell, rewritten through a
temporary file and ``os.replace`` after every cell, so a killed run loses at most the cell in
progress. A stored cell is reused only when its key (table, dataset, method and the whole
setting) matches exactly.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from omegaconf import OmegaConf

from experiments.config_tree import config_dir  # the config tree specjax-run composes
from specjax.platform import hardware, provenance

RESULTS = Path(__file__).parent / "results"
SESSION = uuid.uuid4().hex[:12]  # one per process: which cells were measured together

#: Display names of the datasets (EAGLE 80-prompt suites, ``specjax.prompts``; Spec-Bench's
#: tasks as ``spec_bench/<task>``).
DATASETS = {"humaneval": "HumanEval", "gsm8k": "GSM8K", "alpaca": "Alpaca", "mt_bench": "MT-Bench",
            "spec_bench/mt_bench": "SB multi-turn", "spec_bench/translation": "SB translation",
            "spec_bench/summarization": "SB summarization", "spec_bench/qa": "SB QA",
            "spec_bench/math_reasoning": "SB math", "spec_bench/rag": "SB RAG"}
#: Table 1's multi-draft verifiers (K = setting.K); the rest run with K = 1.
MULTI_DRAFT = ("specinfer", "spectr", "spectr_gbv", "multipath_block", "traversal")
SINGLE_DRAFT = ("token", "greedy_block", "block")
#: Paper names of the rows the paper reports (SpecTr-GBV, arXiv / secondhand).
PAPER_NAMES = {"ar": "AR", "token": "SD", "greedy_block": "GBV", "spectr": "SpecTr",
               "spectr_gbv": "SpecTr-GBV"}


@dataclass(frozen=True)
class Setting:
    """What every cell of one table shares. ``models`` names ``configs/model/<models>.yaml``."""

    models: str
    datasets: tuple[str, ...]
    n: int  # prompts per dataset (the first n of each suite)
    max_new_tokens: int
    K: int
    L: int
    temperature: float
    batch_size: int | None  # prompts per jitted call (1 = latency; None = a dataset at once)
    seed: int = 0
    fast_compile: bool = False  # XLA opt level 0: toy runs only (compile time >> run time)
    repeats: int = 1  # timings per cell, interleaved across methods (see the module docstring)
    draft_weights: str = "float32"  # the draft model's weights (the target's: target_weights)
    draft_vocab: int | None = None  # the draft samples from its first n token ids (+ EOS)
    breakdown: bool = False  # time draft / tree / verify / other once per method
    target_weights: str = "float32"  # the target model's weights (int8: another target law)

    @property
    def toy(self) -> bool:
        return self.models == "toy"

    @property
    def latency(self) -> bool:
        return self.batch_size == 1

    @property
    def regime(self) -> str:
        from specjax.eval.metrics import regime

        return regime(self.batch_size, None if self.batch_size else self.n)


@dataclass(frozen=True)
class Method:
    """One row: a verifier (None = autoregressive) with its number of drafts, and optionally a
    drafting variant of its own (draft length, draft weights, draft vocabulary; None = the
    setting's), named by ``label``."""

    verifier: str | None
    K: int = 1
    L: int | None = None
    draft_weights: str | None = None
    draft_vocab: int | None = None
    threshold: float | None = None  # adaptive draft length (AdaptiveDrafter); None = fixed L
    drafter: str | None = None  # a drafting policy by name (``specjax.drafters.DRAFTERS``)
    # Autoregressive steps while speculating does not pay (``specjax.decode.fallback``): a
    # break-even in tokens per speculative step, or "auto" (measured once per cell, stored in
    # it, and reused by its timing repeats so that they decode the same tokens); None = off.
    break_even: float | str | None = None
    label: str | None = None

    @property
    def name(self) -> str:
        return self.label or self.verifier or "ar"


def table1_methods(K: int) -> list[Method]:
    """AR, the single-draft verifiers at K = 1, the multi-draft ones at K."""
    return ([Method(None)] + [Method(v, 1) for v in SINGLE_DRAFT]
            + [Method(v, K) for v in MULTI_DRAFT])


def select(methods: list[Method], names: str | None) -> list[Method]:
    """Keep the methods named in a comma list (``--methods ar,token``); all when None."""
    if not names:
        return methods
    wanted = [x.strip() for x in names.split(",") if x.strip()]
    known = {m.name for m in methods}
    unknown = sorted(set(wanted) - known)
    if unknown:
        raise SystemExit(f"--methods: unknown {unknown}; allowed: {sorted(known)}")
    return [m for m in methods if m.name in wanted]


def model_names(models: str) -> tuple[str, str]:
    """(target, draft) from ``configs/model/<models>.yaml`` (the Hydra group the CLI uses)."""
    cfg = OmegaConf.load(config_dir() / "model" / f"{models}.yaml")
    return str(cfg.target), str(cfg.draft)


def load_pair(setting: Setting):
    """The loaded (target, draft); the Qwen pair downloads its GGUF files on first use."""
    target_name, draft_name = model_names(setting.models)
    if setting.toy:
        from specjax.models.toy import load_toy

        return load_toy(target_name), load_toy(draft_name)
    from specjax import load_model

    return (load_model(target_name, weights=setting.target_weights),
            load_model(draft_name, weights=setting.draft_weights))


def prompt_texts(setting: Setting, dataset: str, target) -> tuple[list[str], list[str]]:
    """(prompt ids, texts the target sees) of one dataset under ``setting``.

    Real pairs: the first n prompts of the EAGLE suite, in the target's chat template. The toy
    pair cannot read text, so dataset number d stands in with toy prompts d*n .. d*n + n - 1
    (disjoint slices of ``specjax.prompts``'s toy suite, raw token ids, no template).
    """
    from specjax.prompts import PromptSuite, load_prompts

    if setting.toy:
        d = setting.datasets.index(dataset)
        prompts = load_prompts("toy")[d * setting.n:(d + 1) * setting.n]
        return [p.id for p in prompts], [p.text for p in prompts]
    suite, _, task = dataset.partition("/")  # spec_bench/<task>: one Spec-Bench task
    suite = PromptSuite(suite=suite, category=task or None, n=setting.n, shuffle=False, chat=True)
    prompts = suite.load()
    return [p.id for p in prompts], suite.texts(target, prompts)


def cell_key(table: str, dataset: str, method: Method, setting: Setting) -> str:
    """What a cell's measurement depends on. Not the setting's dataset list: a cell is one
    dataset, so a run of ``--datasets humaneval`` and a run of all three share its cells."""
    variant = {k: v for k, v in asdict(method).items()
               if k in ("L", "draft_weights", "draft_vocab", "threshold", "drafter", "break_even")
               and v is not None}
    return normal_key(json.dumps({"table": table, "dataset": dataset, "method": method.name,
                                  "K": method.K, "setting": asdict(setting), **variant}))


def normal_key(key: str) -> str:
    """``key`` without the setting's dataset list (stores written before ``cell_key`` dropped
    it are read through this, so their cells stay found)."""
    data = json.loads(key)
    data.get("setting", {}).pop("datasets", None)
    if data.get("setting", {}).get("target_weights") == "float32":  # the field's default:
        del data["setting"]["target_weights"]  # stores from before it existed stay found
    return json.dumps(data, sort_keys=True)


class CellStore:
    """Cells of one table run, one JSON line each; rewritten atomically after every cell."""

    def __init__(self, path: Path, resume: bool = True):
        self.path = Path(path)
        self.resume = resume
        self.cells: dict[str, dict] = {}
        if self.path.exists():  # kept on disk either way; ``resume`` decides whether to reuse
            for line in self.path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    row["key"] = normal_key(row["key"])
                    self.cells[row["key"]] = row

    def get(self, key: str) -> dict | None:
        """The stored cell: any earlier one with ``resume``, else only this session's."""
        row = self.cells.get(key)
        return row if row is not None and (self.resume or row["session"] == SESSION) else None

    def put(self, row: dict) -> None:
        self.cells[row["key"]] = row
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in self.cells.values()))
        os.replace(tmp, self.path)


def _seconds_per_prompt(per_prompt: list[dict], batch: int) -> list[float]:
    """Each batch's wall time split over its prompts in proportion to their loop steps (at batch
    1: each prompt's own time)."""
    out = []
    for b in range(0, len(per_prompt), batch):
        rows = per_prompt[b:b + batch]
        steps = sum(r["target_calls"] for r in rows)
        out += [r["wall_time_s"] * (r["target_calls"] / steps if steps else 1 / len(rows))
                for r in rows]
    return out


def min_calls(new_tokens: int, L: int) -> int:
    """The fewest target calls that can emit ``new_tokens`` (each emits at most L + 1)."""
    return -(-new_tokens // (L + 1))


def drafter_for(setting: Setting, method: Method):
    from specjax.drafters import AdaptiveDrafter, ModelDrafter, get_drafter

    if method.drafter is not None:
        options = {} if method.threshold is None else dict(threshold=method.threshold)
        return get_drafter(method.drafter, K=method.K, L=method.L or setting.L, **options)
    if method.threshold is not None:
        return AdaptiveDrafter(K=method.K, L=method.L or setting.L, threshold=method.threshold)
    return ModelDrafter(K=method.K, L=method.L or setting.L,
                        draft_vocab=method.draft_vocab or setting.draft_vocab)


def draft_weights_of(setting: Setting, method: Method) -> str:
    return method.draft_weights or setting.draft_weights


class Models:
    """The target, and each draft weight format a table needs, loaded once on first use."""

    def __init__(self, setting: Setting):
        self.setting = setting
        self.target, self.drafts = None, {}

    def pair(self, method: Method):
        if self.target is None:
            self.target, self.drafts[self.setting.draft_weights] = load_pair(self.setting)
        weights = draft_weights_of(self.setting, method)
        if weights not in self.drafts:  # only the draft: a second target would not fit in RAM
            from specjax import load_model

            self.drafts[weights] = load_model(model_names(self.setting.models)[1],
                                              weights=weights)
        return self.target, self.drafts[weights]


def run_cell(setting: Setting, method: Method, texts: list[str], target, draft, *,
             breakdown: bool = False, keep_compiled: int | None = None,
             break_even: float | None = None) -> dict:
    """Decode ``texts`` with one method once; per-prompt counters and timings as plain JSON.
    ``keep_compiled``: compiled loops kept between calls (``generate``'s default when None).
    ``break_even``: the value a ``break_even="auto"`` method measured before (its repeats)."""
    import specjax
    from algorithms.verifiers import get_verifier
    from specjax.eval.root_bound import RootBoundProbe

    kw = {}
    L = 1
    if method.verifier is not None:
        L = method.L or setting.L
        verifier = get_verifier(method.verifier)
        # The alpha* probe runs inside the timed loop: at K = 1 it is one pass over the
        # vocabulary; at K > 1 it sorts the vocabulary every step (tens of ms on a CPU at
        # V = 151,936), which would slow the very cells whose speed the table reports, so real
        # models' K > 1 cells carry no alpha* (the toys' 4-token sort costs nothing).
        if method.K == 1 or setting.toy:
            verifier = RootBoundProbe(verifier=verifier)
        kw = dict(draft=draft, drafter=drafter_for(setting, method), verifier=verifier)
    measured = {}
    if method.break_even is not None:
        from specjax.decode.fallback import Fallback

        if break_even is None and method.break_even == "auto":
            from specjax.tuning.break_even import measure_break_even

            break_even, measured["break_even_probe"] = measure_break_even(
                target, draft, kw["drafter"], texts, verifier=kw["verifier"],
                sampling=specjax.Sampling(temperature=setting.temperature), seed=setting.seed)
        break_even = float(method.break_even if break_even is None else break_even)
        kw["fallback"] = Fallback(break_even=break_even)
        measured["break_even"] = break_even
    start = time.perf_counter()
    res = specjax.generate(
        target, texts, sampling=specjax.Sampling(temperature=setting.temperature),
        max_new_tokens=setting.max_new_tokens, seed=setting.seed,
        batch_size=setting.batch_size, breakdown=breakdown and method.verifier is not None,
        compiler_options={"xla_backend_optimization_level": 0} if setting.fast_compile else None,
        **({} if keep_compiled is None else {"keep_compiled": keep_compiled}), **kw)
    elapsed = time.perf_counter() - start
    batch = len(texts) if setting.batch_size is None else setting.batch_size
    seconds = _seconds_per_prompt(res.per_prompt, batch)
    prompts = [dict(prompt_tokens=r["prompt_tokens"], new_tokens=r["new_tokens"],
                    target_calls=r["target_calls"], accepted=r["accepted"],
                    accepted_per_position=r["accepted_per_position"],
                    root_accepted=r["accepted_per_position"][0] if r["accepted_per_position"]
                    else 0,
                    root_bound=r.get("root_bound", 0.0),
                    min_calls=min_calls(r["new_tokens"], L), seconds=s,
                    ar_steps=r.get("ar_steps", 0),
                    seconds_by_repeat=[s], stop=r["stop"])
               for r, s in zip(res.per_prompt, seconds, strict=True)]
    out = dict(prompts=prompts, wall_time_s=res.summary["wall_time_s"],
               compile_time_s=res.summary["compile_time_s"], elapsed_s=elapsed,
               block_efficiency=res.summary["block_efficiency"],
               tokens_per_s=res.summary["tokens_per_s"], tokens=res.tokens, **measured)
    if "time_breakdown" in res.summary:
        out["time_breakdown"] = res.summary["time_breakdown"]
    return out


def add_repeat(row: dict, result: dict, repeat: int) -> None:
    """Fold one more timing of a cell into its stored row (same tokens required)."""
    if result["tokens"] != row["tokens"]:
        bad = next(i for i, (a, b) in enumerate(zip(result["tokens"], row["tokens"],
                                                    strict=True)) if a != b)
        raise RuntimeError(f"{row['dataset']} / {row['method']}: repeat {repeat} decoded other "
                           f"tokens than repeat 0 for prompt {bad} (same seed and code path "
                           "must give the same tokens); the timings would not be comparable")
    for p, new in zip(row["prompts"], result["prompts"], strict=True):
        p["seconds_by_repeat"].append(new["seconds"])
        p["seconds"] = sum(p["seconds_by_repeat"]) / len(p["seconds_by_repeat"])
    row["wall_time_s"] += result["wall_time_s"]
    row["elapsed_s"] += result["elapsed_s"]
    row["compile_time_s"] += result["compile_time_s"]
    row["repeats_done"] = repeat + 1
    row["sessions"] = sorted({*row["sessions"], SESSION})
    row["commits"] = sorted({*row["commits"], provenance.commit()})


def run_cells(table: str, preset: str, setting: Setting, methods: list[Method], out: Path,
              resume: bool = True, log=print, measure: bool = True,
              repeats: int | None = None, require_all: bool = True) -> tuple[dict, CellStore]:
    """Every (dataset, method) cell, measured or taken from the store -> {(dataset, method): row}.

    Models load only when some cell is missing. Per dataset, repeat r of every method (AR first)
    runs before repeat r + 1 of any; each finished repeat is stored, so a killed run resumes at
    the repeat it was in. Every method's compiled loop is kept for the whole table (one compile
    per method and prompt padding), and the persistent compilation cache is on for real models.
    A stored cell gets more repeats only on the machine that timed it: two machines' seconds
    averaged into one cell would be a speed of neither. ``measure=False`` runs nothing and
    returns the stored cells as they are (a cell may have fewer repeats than the setting asks).
    ``repeats`` stops after that many of the setting's repeats (the cells' keys still name the
    setting's count): a table whose cells span several settings (an ablation) calls this once
    per setting for repeat 1, then again for repeat 2, ..., so its repeats interleave too.
    ``require_all=False`` (with ``measure=False``): the stored cells only, missing ones left out
    of the dict instead of refused (a table that renders what is measured so far).
    """
    from specjax import api

    # Every method's loop stays compiled for the whole table: one compile per method and padding.
    keep_compiled = max(api.KEEP_COMPILED, len(methods) + 1)
    store = CellStore(Path(out) / "runs" / f"{table}_{preset}" / "cells.jsonl", resume=resume)
    keys = {(d, m.name): cell_key(table, d, m, setting) for d in setting.datasets for m in methods}
    done = lambda row: row is not None and row.get("repeats_done", 1) >= setting.repeats  # noqa
    todo = [k for k, key in keys.items() if not done(store.get(key))]
    if not measure:
        missing = [f"{d} / {name}" for (d, name), key in keys.items() if store.get(key) is None]
        if not require_all:
            return {k: store.get(key) for k, key in keys.items()
                    if store.get(key) is not None}, store
        if missing:
            raise SystemExit(f"{store.path} has no stored cell for {', '.join(missing)} in this "
                             "setting: run without --render-only to measure them")
        return {k: store.get(key) for k, key in keys.items()}, store
    if todo and committed_out(out) and provenance.commit().endswith("+dirty"):
        raise SystemExit(f"{table} [{preset}]: the checkout has uncommitted edits, so the cells "
                         f"measured now would be +dirty and a table in {RESULTS} refuses them; "
                         "commit first, or measure into another folder with --out")
    models = Models(setting)
    if todo and not setting.toy:
        from specjax.platform import compile_cache

        compile_cache.enable()
    ordered = sorted(methods, key=lambda m: m.verifier is not None)  # AR first
    broken_down: set[str] = set()
    for dataset in setting.datasets:
        prompts = None
        for repeat in range(min(setting.repeats, repeats or setting.repeats)):
            for method in ordered:
                key = keys[dataset, method.name]
                row = store.get(key)
                if row is not None and row.get("repeats_done", 1) > repeat:
                    continue
                if row is not None and row["hardware"] != hardware.describe():
                    raise SystemExit(
                        f"{table} [{preset}] {dataset} / {method.name}: its stored repeats "
                        f"were timed on {row['hardware']}, this machine is "
                        f"{hardware.describe()}; one cell's seconds must come from one "
                        "machine. Rerun with --no-resume to measure the cells here (the "
                        f"stored ones stay in {store.path} until replaced), or "
                        "--render-only to render what is stored.")
                if prompts is None:
                    prompts = prompt_texts(setting, dataset, models.pair(ordered[0])[0])
                ids, texts = prompts
                breakdown = setting.breakdown and method.name not in broken_down and not (
                    row and "time_breakdown" in row)
                result = run_cell(setting, method, texts, *models.pair(method),
                                  breakdown=breakdown, keep_compiled=keep_compiled,
                                  break_even=row.get("break_even") if row else None)
                broken_down |= {method.name} if breakdown else set()
                if row is None:
                    row = dict(key=key, table=table, preset=preset, dataset=dataset,
                               method=method.name, K=method.K, prompt_ids=ids,
                               session=SESSION, sessions=[SESSION],
                               commit=provenance.commit(), commits=[provenance.commit()],
                               hardware=hardware.describe(), regime=setting.regime,
                               repeats_done=1, **result)
                else:
                    add_repeat(row, result, repeat)
                    if "time_breakdown" in result:
                        row["time_breakdown"] = result["time_breakdown"]
                row["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
                store.put(row)
                log(f"{table} [{preset}] {dataset} / {method.name} (K={method.K}) repeat "
                    f"{repeat + 1}/{setting.repeats}: BE {row['block_efficiency']:.3f}, "
                    f"{result['elapsed_s']:.1f} s (compile {result['compile_time_s']:.1f} s)")
    cells = {(d, name): store.get(key) for (d, name), key in keys.items()}
    return cells, store


def committed_out(out: Path) -> bool:
    """Whether ``out`` is the repository's results folder, whose tables get committed."""
    return Path(out).resolve() == RESULTS.resolve()


def refuse_dirty(cells: dict, out: Path, table: str) -> None:
    """A table written into the committed results may hold no cell measured from a checkout
    with uncommitted edits (``+dirty``): such a cell's code is in no commit, so nobody can
    rerun it. The run stops naming the cells; the stored cells stay where they are."""
    if not committed_out(out):
        return
    dirty = sorted(f"{d} / {m} ({c['commit']})" for (d, m), c in cells.items()
                   if c is not None and any("+dirty" in x for x in c.get("commits", [c["commit"]])))
    if dirty:
        raise SystemExit(f"{table}: {len(dirty)} cell(s) were measured from a checkout with "
                         f"uncommitted edits: {', '.join(dirty)}. A table in {RESULTS} takes "
                         "only cells of committed code: remeasure them (--no-resume) from a "
                         "clean checkout, or render elsewhere with --out.")


def with_overrides(setting: Setting, **over) -> Setting:
    """``setting`` with the command-line overrides that were given (None = keep)."""
    return replace(setting, **{k: v for k, v in over.items() if v is not None})
