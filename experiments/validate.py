"""Config checks that run before anything is loaded or written.

A bad value found after minutes of model loading, or after results.jsonl was truncated, costs a
sweep; so the app checks every field it can from the composed config alone, then the pairings
that need the instantiated objects (verifier.max_drafts vs K) or the loaded models (vocabularies),
and only then writes output. Each failure is one :class:`ConfigError` naming the field and the
allowed values; the app turns it into one line on stderr and exit code 2 (the usual usage-error
code, distinct from a crash).
"""

from __future__ import annotations

import importlib
import numbers

from omegaconf import DictConfig

from experiments.config_tree import group_options

GROUPS = ("model", "drafter", "verifier", "sampling", "dataset", "logger", "experiment",
          "mesh")


class ConfigError(ValueError):
    """An invalid config value; ``field`` is its dotted path (``drafter.K``)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def check_group_overrides(args: list[str]) -> None:
    """Reject ``verifier=nope`` (also inside ``-m verifier=a,b``) before Hydra composes anything.

    Hydra would report it too, but with exit code 1 like any crash; only plain names and comma
    lists are checked, sweep functions such as ``choice(...)``/``glob(...)`` are left to Hydra.
    """
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~").removeprefix("/")
        if key not in GROUPS or "(" in value or value in ("", "null"):
            continue
        allowed = group_options(key)
        for choice in value.split(","):
            if choice not in allowed:
                raise ConfigError(key, f"unknown {key} {choice!r}; allowed: {', '.join(allowed)}")


def _int(cfg: DictConfig, path: str, low: int, *, optional: bool = False) -> None:
    value = _get(cfg, path)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        extra = " or null" if optional else ""
        raise ConfigError(path, f"must be an integer >= {low}{extra}, got {value!r}")


def _get(cfg: DictConfig, path: str):
    node = cfg
    for part in path.split("."):
        if part not in node:
            raise ConfigError(path, "missing from the config")
        node = node[part]
    return node


def _number(cfg: DictConfig, path: str):
    value = _get(cfg, path)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(path, f"must be a number, got {value!r}")
    return value


def _fallback(cfg: DictConfig) -> None:
    """``fallback.break_even``: null (always speculate), auto, or tokens per step >= 1."""
    if cfg.fallback.get("break_even") is None:
        return
    if cfg.fallback.break_even != "auto" and _number(cfg, "fallback.break_even") < 1:
        raise ConfigError("fallback.break_even", "must be >= 1 (tokens a speculative step "
                          "emits at break-even), auto (measured) or null, got "
                          f"{cfg.fallback.break_even!r}")
    _int(cfg, "fallback.max_wait", 1)
    if not 0 <= _number(cfg, "fallback.decay") < 1:
        raise ConfigError("fallback.decay", f"must be in [0, 1), got {cfg.fallback.decay!r}")
    if cfg.drafter.get("_target_", "").rsplit(".", 1)[-1] in ("EagleDrafter", "MedusaDrafter"):
        raise ConfigError("fallback.break_even", "the trained heads (drafter=eagle, medusa) read "
                          "the target's features at every step and cannot skip steps; use "
                          "drafter=model, adaptive, dynamic_tree, early_exit or ngram, or "
                          "fallback.break_even=null")


def check_config(cfg: DictConfig) -> None:
    """Field-by-field checks on the composed config (no imports of models or drafters)."""
    _int(cfg, "drafter.K", 1)
    if cfg.drafter.get("L") == "auto":
        if not str(cfg.drafter.get("_target_", "")).endswith(("ModelDrafter", "GreedyDrafter")):
            raise ConfigError("drafter.L", "L=auto measures a draft model's cost against the "
                              "target's; it applies to drafter=model or drafter=greedy only "
                              "(give an integer L >= 1 here)")
    else:
        _int(cfg, "drafter.L", 1)
    if cfg.drafter.get("draft_vocab") is not None:
        _int(cfg, "drafter.draft_vocab", 1)
    if "num_layers" in cfg.drafter:
        _int(cfg, "drafter.num_layers", 1)
    if "min_ngram" in cfg.drafter:
        _int(cfg, "drafter.min_ngram", 1)
        _int(cfg, "drafter.max_ngram", cfg.drafter.min_ngram)
    _int(cfg, "max_new_tokens", 1)
    _int(cfg, "seed", 0)
    _int(cfg, "batch_size", 1, optional=True)
    if "timing_repeats" in cfg:
        _int(cfg, "timing_repeats", 1)
    _int(cfg, "dataset.n", 1, optional=True)
    if cfg.get("fallback") is not None:
        _fallback(cfg)
    if not isinstance(cfg.get("compile_cache", True), bool):
        raise ConfigError("compile_cache", f"must be true or false, got {cfg.compile_cache!r}")
    if _number(cfg, "sampling.temperature") < 0:
        raise ConfigError("sampling.temperature",
                          f"must be >= 0 (0 = greedy), got {cfg.sampling.temperature}")
    _int(cfg, "sampling.top_k", 0)
    top_p = _number(cfg, "sampling.top_p")
    if not 0 < top_p <= 1:
        raise ConfigError("sampling.top_p", f"must be in (0, 1] (1 = off), got {top_p}")
    from specjax.models.quant import WEIGHT_FORMATS

    weights = cfg.model.get("weights")
    if weights is not None and weights not in WEIGHT_FORMATS:
        raise ConfigError("model.weights", f"unknown weight format {weights!r}; allowed: "
                          f"{', '.join(WEIGHT_FORMATS)} (or null: the device's default)")
    if weights not in (None, "float32") and str(_get(cfg, "model.target")).startswith("toy"):
        raise ConfigError("model.weights", f"weights={weights} applies to the GGUF and Hugging "
                          "Face models; the toy models are exact float tables (use float32)")
    draft_weights = cfg.model.get("draft_weights")
    if draft_weights is not None and draft_weights not in WEIGHT_FORMATS:
        raise ConfigError("model.draft_weights", f"unknown weight format {draft_weights!r}; "
                          f"allowed: {', '.join(WEIGHT_FORMATS)} (or null: the target's)")
    if draft_weights not in (None, "float32") and str(cfg.model.get("draft")).startswith("toy"):
        raise ConfigError("model.draft_weights", f"draft_weights={draft_weights} applies to "
                          "the GGUF and Hugging Face models; the toy models are exact float "
                          "tables")
    from specjax.models.quant import ACTIVATIONS, PASS_ACTIVATIONS, check_activations

    # The draft's weights default to the target's; the weights' own default is not int8.
    for field, own, allowed in (
            ("prefill_activations", weights, ACTIVATIONS),
            ("draft_prefill_activations", draft_weights or weights, ACTIVATIONS),
            ("decode_activations", weights, PASS_ACTIVATIONS),
            ("draft_decode_activations", draft_weights or weights, PASS_ACTIVATIONS)):
        value = cfg.model.get(field)
        if value is not None:
            try:
                check_activations(value, own or "float32", field, allowed)
            except ValueError as e:
                raise ConfigError(f"model.{field}", str(e)) from None
    from specjax.prompts import SUITES

    if cfg.dataset.suite not in SUITES:
        raise ConfigError("dataset.suite",
                          f"unknown suite {cfg.dataset.suite!r}; allowed: {', '.join(SUITES)}")
    target = str(_get(cfg, "model.target"))
    if target.startswith("toy") and cfg.dataset.suite not in ("toy", "file"):
        raise ConfigError("dataset", f"model.target={target} reads space-separated token ids, "
                          f"not {cfg.dataset.suite!r} text; the toy models take dataset=toy "
                          "or a file of token ids (dataset=file dataset.chat=false), not the "
                          "text suites (use model=smollm2 / model=qwen-coder for those)")
    check_prompt_file(cfg)
    check_verifier_available(cfg)


def check_prompt_file(cfg: DictConfig) -> None:
    """``dataset=file``: read the whole file now, so a bad line is refused (with its number)
    before any model loads; its fields anywhere else are refused too."""
    fields = {"path": None, "field": "prompt", "category": None}
    if cfg.dataset.suite not in ("file", "spec_bench"):
        for name, default in fields.items():
            if cfg.dataset.get(name, default) != default:
                raise ConfigError(f"dataset.{name}", "applies to dataset=file only, not "
                                  f"dataset.suite={cfg.dataset.suite!r}")
        return
    from specjax.prompts.files import read_prompt_file
    from specjax.prompts.suites import load_prompts

    try:
        if cfg.dataset.suite == "spec_bench":
            load_prompts("spec_bench", category=cfg.dataset.get("category"))
        else:
            read_prompt_file(cfg.dataset.get("path"), cfg.dataset.get("field", "prompt"),
                             cfg.dataset.get("category"))
    except ValueError as e:
        field, _, message = str(e).partition(": ")
        raise ConfigError(field, message) from None


def check_verifier_available(cfg: DictConfig) -> None:
    """The verifier's ``_target_`` must be a registered verifier, or a class that imports (a
    user's own verifier not registered yet)."""
    from algorithms.verifiers import list_verifiers, verifier_target

    target = _get(cfg, "verifier._target_")
    if target in {verifier_target(n) for n in list_verifiers()}:
        return
    try:
        module, cls = target.rsplit(".", 1)
        getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError, ValueError):
        raise ConfigError("verifier", f"cannot import {target!r}; registered verifiers: "
                                      f"{', '.join(list_verifiers())}") from None


def verifier_name(verifier) -> str:
    """Registry name of a verifier instance (its class name when unregistered)."""
    from algorithms.verifiers import name_of

    return name_of(verifier) or type(verifier).__name__


def check_pairing(cfg: DictConfig, drafter, verifier) -> None:
    """Multi-draft K against a single-draft verifier (Verifier.max_drafts), and the drafter's
    draft structure against the ones the verifier is lossless for (lookup drafts are not i.i.d.).
    """
    from algorithms.verifiers import accepted_structures

    max_drafts = getattr(verifier, "max_drafts", None)
    if max_drafts is not None and drafter.K > max_drafts:
        raise ConfigError("drafter.K", f"verifier={verifier_name(verifier)} takes at most "
                          f"max_drafts={max_drafts} draft(s), got K={drafter.K}; use K=1 or a "
                          "multi-draft verifier")
    structure = getattr(drafter, "draft_structure", "iid")
    if (drafter.K > 1 or structure == "stopped") and structure not in accepted_structures(
            verifier):
        from algorithms.verifiers import list_verifiers, verifier_class

        allowed = [n for n in list_verifiers() if structure in accepted_structures(
            verifier_class(n)) and (structure == "stopped"
                                    or getattr(verifier_class(n), "max_drafts", None) is None)]
        raise ConfigError("verifier", f"verifier={verifier_name(verifier)} is not defined for "
                          f"{structure} drafts (drafter {type(drafter).__name__}, K={drafter.K}); "
                          f"allowed: {', '.join(allowed)}"
                          + ("" if structure == "stopped" else ", or K=1"))


def check_models(target, draft, needs_draft: bool) -> None:
    """The model drafter proposes token ids of the target's vocabulary: logits widths and
    tokenizers must agree (``specjax.models.loader.check_pair``)."""
    if not needs_draft:
        return
    if draft is None:
        raise ConfigError("model.draft", "drafter=model needs a draft model; set model.draft "
                          "or use drafter=ngram / drafter=early_exit")
    from specjax.models.loader import check_pair

    try:
        check_pair(target, draft)
    except ValueError as e:
        raise ConfigError("model.draft", str(e)) from None
