"""``specjax.generate``: the Python API the CLI mirrors (prompts in, tokens + texts + metrics out).

Host-side work only, in four named steps: ``_resolve`` (names to models and a verifier, prompts
to ids, every input check), ``_plan_batches`` (equal batches, each padded to its own length
bucket; a padding row is done from the start), ``_compile`` (ONCE per shape, kept in a small
cache), and ``_collect`` (time the compiled calls, then tokens, texts and metrics). Compile time
is measured around ``lower().compile()`` and reported separately, so wall time and tokens/s are
pure generation, prefill included; the prefill's own time is reported beside them.

Each call runs two programs: ``DecodeLoop.start`` (the prefill, compiled per padded prompt
width) and ``DecodeLoop.resume`` (the decode loop, compiled once per run). Padding every prompt
to the run's longest made a 569-token prompt cost its 1,500-token neighbour's prefill (AR 20.3 s
alone, 31.3 s beside it on an Intel Xeon); now a prompt's cost depends on its own length only.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field

import jax
import numpy as np
from flax import nnx

from specjax.decode.engine import DecodeLoop
from specjax.eval.metrics import per_prompt_metrics, summarize
from specjax.models.sampling import Sampling

#: (program, loop, batch, pad, options) -> compiled executable, reused across calls; the least
#: recently used are dropped beyond ``generate(keep_compiled=...)`` loops (a loop's prefills
#: count with it). Each XLA:CPU executable holds
#: thousands of memory mappings, and a sweep that kept every loop (paper_repro.table1, 20 loops
#: of the Qwen pair) hit the kernel's 65,530-mapping limit ("LLVM ERROR: Unable to allocate
#: section memory").
_COMPILED: OrderedDict = OrderedDict()
KEEP_COMPILED = 4


def prompt_bucket(n: int) -> int:
    """The padded width a prompt of ``n`` tokens is prefilled at: a multiple of 32 up to 256,
    then four widths per doubling (256, 320, 384, 448, 512, 640, ...). A prefill program is
    compiled per width, so the widths are few; none pads more than a quarter of the prompt
    beyond 256 tokens, and a prompt's width never depends on the other prompts of the run."""
    if n <= 256:
        return max(32, -(-n // 32) * 32)
    step = 1 << (max(n - 1, 1).bit_length() - 3)  # a quarter of the power of two below n
    return -(-n // step) * step


@dataclass
class GenerationResult:
    tokens: list[list[int]]  # generated ids per prompt (EOS included when hit)
    texts: list[str]  # decoded generated text (without the final EOS)
    per_prompt: list[dict]
    summary: dict
    prompt_tokens: list[list[int]] = field(default_factory=list)


def _resolve_model(m):
    if m is None or not isinstance(m, str):
        return m
    from specjax.registry import load_model

    return load_model(m)


def _resolve_verifier(verifier, drafter):
    from algorithms.verifiers import get_verifier

    if drafter is None:
        return None
    if verifier is None:
        if drafter.K > 1:
            raise ValueError(f"verifier: K={drafter.K} drafts need a multi-draft verifier "
                             "(e.g. 'specinfer', 'spectr', 'traversal'); none was given")
        verifier = "token"
    if isinstance(verifier, str):
        verifier = get_verifier(verifier)
    from algorithms.verifiers import check_pairing

    # Max drafts and draft structure (i.i.d. vs deterministic lookup), before anything compiles.
    check_pairing(verifier, drafter.draft_structure, drafter.K,
                  drafter_name=type(drafter).__name__)
    return verifier


def _encode(target, prompts, chat: bool) -> list[list[int]]:
    if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
        prompts = [prompts]
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            if chat:
                p = target.apply_chat_template([{"role": "user", "content": p}])
            ids = list(target.encode(p))
        else:
            ids = [int(t) for t in p]
        if not ids:
            raise ValueError(f"prompts: prompt {i} is empty; every prompt needs >= 1 token")
        if min(ids) < 0 or max(ids) >= target.vocab_size:
            raise ValueError(f"prompts: prompt {i} has ids outside [0, {target.vocab_size})")
        out.append(ids)
    if not out:
        raise ValueError("prompts: no prompts given")
    return out


def _context(loaded) -> int:
    """Positions a loaded model can attend over: the GGUF context length, else ``model.max_len``
    (the toys). The engine sizes its cache from prompt + max_new_tokens, so this is the limit."""
    config = getattr(loaded, "config", None)
    return int(getattr(config, "context_length", None) or loaded.model.max_len)


def _check_lengths(ids: list[list[int]], max_new_tokens: int, models) -> None:
    """Every prompt plus ``max_new_tokens`` must fit each model's context (before compiling)."""
    for loaded in models:
        limit = _context(loaded)
        for i, p in enumerate(ids):
            if len(p) + max_new_tokens > limit:
                fix = (f"lower max_new_tokens to at most {limit - len(p)} or shorten the prompt"
                       if len(p) < limit else f"shorten the prompt to under {limit} tokens")
                raise ValueError(
                    f"prompts: prompt {i} has {len(p)} tokens; with max_new_tokens="
                    f"{max_new_tokens} it needs {len(p) + max_new_tokens} positions, over the "
                    f"{limit}-token context of {getattr(loaded, 'name', 'the model')!r}; {fix}")


def _raise_nonfinite(counters: dict, n_prompts: int) -> None:
    """The loop stopped a sequence whose laws were NaN/inf (nothing was sampled from them)."""
    from specjax.decode.engine import NONFINITE_DRAFT

    bad = np.flatnonzero(counters["nonfinite"][:n_prompts])
    if bad.size:
        i = int(bad[0])
        which = "the drafter's laws q" if counters["nonfinite"][i] == NONFINITE_DRAFT else (
            "the target's logits")
        raise ValueError(
            f"prompts: prompt {i}: {which} were not finite (NaN/inf) after "
            f"{int(counters['new_tokens'][i])} generated tokens; generation stopped there "
            f"(no token was sampled from them; {bad.size} prompt(s) affected: "
            f"{', '.join(map(str, bad[:10].tolist()))})")


@dataclass(frozen=True)
class _Batches:
    """Prompts split into equal calls, each padded to its longest prompt's bucket."""

    arrays: list  # per call: (prompt ids [rows, width], lengths [rows], key data [rows])
    size: int  # prompts per call, B
    rows: int  # rows per call: B, rounded up to a multiple of the mesh's data axis
    pad: int  # the widest call's width: the loop's ``prompt_pad``


def _resolve(target, prompts, draft, drafter, verifier, max_new_tokens, chat, shared_prompt):
    """Names to models and a verifier, prompts to ids: every input check before compiling."""
    target, draft = _resolve_model(target), _resolve_model(draft)
    if not (isinstance(max_new_tokens, int) and max_new_tokens >= 1):
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens}")
    verifier = _resolve_verifier(verifier, drafter)
    dmodule = drafter.module(target, draft) if drafter is not None else None
    ids = _encode(target, prompts, chat)
    _check_lengths(ids, max_new_tokens, [target] if dmodule is None or draft is None
                   else [target, draft])
    if shared_prompt:
        other = next((i for i, p in enumerate(ids) if p != ids[0]), None)
        if other is not None:
            raise ValueError(f"shared_prompt: every prompt must be the same token sequence, but "
                             f"prompt {other} differs from prompt 0; pass shared_prompt=False")
    return target, verifier, dmodule, ids


def _plan_batches(ids: list[list[int]], batch_size: int | None, seed: int, mesh,
                  target) -> _Batches:
    """Cut equal calls, each padded to ``prompt_bucket`` of its longest prompt; prompt i gets
    the key ``fold_in(key(seed), i)`` whatever call it lands in."""
    B = len(ids) if batch_size is None else int(batch_size)
    if B < 1:
        raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
    rows = B  # per call; a mesh's data axis needs a multiple of its size (padding rows are done)
    if mesh is not None:
        from specjax.decode import parallel

        parallel.check_tensor_parallel(getattr(target.model, "config", None), mesh.shape["model"])
        rows = -(-B // mesh.shape["data"]) * mesh.shape["data"]
    root = jax.random.key(seed)
    arrays = []
    for b in range(-(-len(ids) // B)):
        chunk = ids[b * B:(b + 1) * B]
        P = np.zeros((rows, prompt_bucket(max(len(p) for p in chunk))), np.int32)
        lengths = np.zeros((rows,), np.int32)
        for r, p in enumerate(chunk):
            P[r, : len(p)] = p
            lengths[r] = len(p)
        keys = jax.random.key_data(jax.vmap(lambda i: jax.random.fold_in(root, i))(
            np.arange(b * B, b * B + rows)))
        arrays.append((P, lengths, keys))
    return _Batches(arrays=arrays, size=B, rows=rows, pad=max(a[0].shape[1] for a in arrays))


def _compile(loop: DecodeLoop, tstate, dstate, batches: _Batches, compiler_options: dict | None,
             keep_compiled: int, progress: bool):
    """(programs, compile seconds): ``programs(b)`` is call b's (prefill, loop) executables,
    from this process's cache when the shape was compiled before (0 s), else lowered and
    compiled once: the loop once, a prefill per padded width."""
    options = tuple(sorted((compiler_options or {}).items()))
    loop_key = ("resume", loop, batches.size, options)
    compile_time = 0.0

    def jitted(f, **kw):
        if loop.mesh is not None:
            kw["out_shardings"] = _replicated(loop.mesh) if f == loop.resume else None
        return jax.jit(f, **{k: v for k, v in kw.items() if v is not None})

    def compiled(key, what, lower):
        nonlocal compile_time
        if key not in _COMPILED:
            if progress:
                print(f"specjax: compiling {what} (once per shape) ...", file=sys.stderr,
                      flush=True)
            t0 = time.perf_counter()
            _COMPILED[key] = lower().compile(compiler_options=compiler_options)
            compile_time += time.perf_counter() - t0
            if progress:
                print(f"specjax: compiled in {time.perf_counter() - t0:.1f} s", file=sys.stderr,
                      flush=True)
        _COMPILED.move_to_end(key)
        return _COMPILED[key]

    mode = "autoregressive" if loop.drafter is None else (
        f"speculative ({type(loop.drafter).__name__} K={loop.K} L={loop.L}, "
        f"{type(loop.verifier).__name__})")
    starts = {}
    for arrays in batches.arrays:
        width = arrays[0].shape[1]
        if width not in starts:
            starts[width] = compiled(
                ("start", loop, batches.size, width, options),
                f"the {mode} prefill for batch {batches.size}, prompt width {width}",
                lambda a=arrays: jitted(loop.start).lower(tstate, dstate, *a))
    # Every width's prefill hands the loop a state of one shape (and, on a mesh, one layout).
    state = starts[batches.arrays[0][0].shape[1]].out_info

    def lower_resume():
        # The state is donated so the loop updates its KV caches in place; its small counters
        # have no output of their shape to reuse, which JAX warns about on every compile.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Some donated buffers were not usable")
            return jitted(loop.resume, donate_argnums=2).lower(tstate, dstate, state)

    resume = compiled(loop_key, f"the {mode} decode loop for batch {batches.size}, "
                      f"{loop.max_new_tokens} new tokens, prompts up to {batches.pad}",
                      lower_resume)
    while sum(k[0] == "resume" for k in _COMPILED) > keep_compiled:
        oldest = next(k for k in _COMPILED if k[0] == "resume")
        for k in [k for k in _COMPILED if k[1] == oldest[1]]:
            del _COMPILED[k]
    return (lambda b: (starts[batches.arrays[b][0].shape[1]], resume)), compile_time


def _replicated(mesh):
    from specjax.decode import parallel

    return parallel.replicated(mesh)


@dataclass(frozen=True)
class _Prepared:
    """One decoding mode, compiled for a plan: the loop, the weights it runs on and its
    programs (``programs(b)``: call b's prefill and loop executables)."""

    loop: DecodeLoop
    tstate: object
    dstate: object
    programs: object
    compile_time: float


def _prepare(target, dmodule, drafter, verifier, sampling, max_new_tokens: int,
             batches: _Batches, *, mesh, shared_prompt: bool, fallback, compiler_options,
             keep_compiled: int, progress: bool) -> tuple[_Prepared, _Batches]:
    """The loop of one mode (``drafter=None``: autoregressive) for ``batches``, its weights on
    the mesh when there is one, and its programs compiled (or taken from the cache)."""
    tgraph, tstate = nnx.split(target.model)
    dgraph, dstate = nnx.split(dmodule) if dmodule is not None else (None, None)
    loop = DecodeLoop(target_graph=tgraph, draft_graph=dgraph, drafter=drafter,
                      verifier=verifier, sampling=sampling, vocab_size=int(target.vocab_size),
                      eos_ids=tuple(int(e) for e in (target.eos_ids or ())),
                      max_new_tokens=max_new_tokens, prompt_pad=batches.pad, mesh=mesh,
                      shared_prompt=bool(shared_prompt), fallback=fallback if drafter else None)
    if mesh is not None:  # weights and batches onto the mesh; outputs come back whole
        from specjax.decode import parallel

        tstate = parallel.shard_params(tstate, mesh, tensor_parallel=mesh.shape["model"] > 1)
        dstate = parallel.shard_params(dstate, mesh, tensor_parallel=False)
        batches = dataclasses.replace(
            batches, arrays=[parallel.shard_batch(a, mesh) for a in batches.arrays])
    programs, compile_time = _compile(loop, tstate, dstate, batches, compiler_options,
                                      keep_compiled, progress)
    return _Prepared(loop, tstate, dstate, programs, compile_time), batches


def _time_call(prep: _Prepared, batches: _Batches, b: int) -> tuple[dict, float, float]:
    """Call b run once: (its counters for the B real rows, prefill seconds, total seconds)."""
    start, resume = prep.programs(b)
    t0 = time.perf_counter()
    state = jax.block_until_ready(start(prep.tstate, prep.dstate, *batches.arrays[b]))
    prefill = time.perf_counter() - t0
    out = jax.block_until_ready(resume(prep.tstate, prep.dstate, state))
    wall = time.perf_counter() - t0
    return {k: np.asarray(v)[:batches.size] for k, v in out.items()}, prefill, wall


def _collect(prep: _Prepared, batches: _Batches, target, ids: list[list[int]],
             outs: list[dict], wall: list[float], prefill: list[float]) -> GenerationResult:
    """Tokens, texts and metrics per prompt and in summary, from each call's counters and its
    seconds (total and prefill; the mean over timing repeats where there were several)."""
    B, loop = batches.size, prep.loop
    counters = {k: np.concatenate([o[k] for o in outs])[: len(ids)] for k in outs[0]}
    _raise_nonfinite(counters, len(ids))

    tokens, texts, per_prompt = [], [], []
    eos = set(loop.eos_ids)
    for i in range(len(ids)):
        start, n = int(counters["prompt_len"][i]), int(counters["n"][i])
        gen = [int(t) for t in counters["history"][i, start:n]]
        tokens.append(gen)
        texts.append(target.decode(gen[:-1] if gen and gen[-1] in eos else gen))
        per_prompt.append(per_prompt_metrics(counters, i, loop.L))
        per_prompt[-1]["wall_time_s"] = wall[i // B]  # the prompt's batch
        per_prompt[-1]["prefill_s"] = prefill[i // B]
        per_prompt[-1]["prompt_width"] = int(batches.arrays[i // B][0].shape[1])
    summary = summarize(per_prompt, L=loop.L, wall_time_s=sum(wall),
                        compile_time_s=prep.compile_time, prefill_s=sum(prefill))
    return GenerationResult(tokens=tokens, texts=texts, per_prompt=per_prompt, summary=summary,
                            prompt_tokens=ids)


def _calls(n: int, progress: bool, desc: str):
    if progress and n > 1:
        from tqdm import tqdm

        return tqdm(range(n), desc=desc, unit="call")
    return range(n)


def _add_breakdown(result: GenerationResult, prep: _Prepared, batches: _Batches,
                   compiler_options, progress: bool) -> None:
    from specjax.decode.breakdown import in_loop, time_breakdown

    if progress:
        print("specjax: timing draft / tree / verify parts at this run's shapes ...",
              file=sys.stderr, flush=True)
    parts = time_breakdown(prep.loop, prep.tstate, prep.dstate, *batches.arrays[0],
                           compiler_options=compiler_options)
    n = len(result.per_prompt)
    calls = [result.per_prompt[b:b + batches.size] for b in range(0, n, batches.size)]
    parts |= in_loop(parts, [c[0]["wall_time_s"] for c in calls],  # one loop per call:
                     [max(m["target_calls"] for m in c) for c in calls])  # its longest row
    result.summary["time_breakdown"] = parts


def generate(target, prompts, *, draft=None, drafter=None, verifier=None, sampling=None,
             max_new_tokens: int = 128, seed: int = 0, chat: bool = False,
             batch_size: int | None = None, progress: bool = True,
             compiler_options: dict | None = None, breakdown: bool = False,
             mesh=None, shared_prompt: bool = False, fallback=None,
             keep_compiled: int = KEEP_COMPILED) -> GenerationResult:
    """Decode ``prompts`` with ``target``; speculative when ``drafter`` is given.

    ``compiler_options`` go to XLA (e.g. ``{"xla_backend_optimization_level": 0}`` trades decode
    speed for compile time in tests); results do not depend on them. The default is XLA's own
    (on CPU: YNNPACK for dots), which ``benchmarks/decode_speed.py`` measures faster
    than Eigen for prefill, tree scoring and one-row decode.

    ``breakdown=True`` adds ``summary["time_breakdown"]`` (``specjax.decode.breakdown``): ms per
    step spent drafting, scoring the tree, verifying, and on the rest, timed at this run's shapes,
    and the step the loop itself took in this run (``in_loop_step_ms``) beside them.

    Output depends only on (models, prompt, its index, settings, seed), not on the batching:
    prompt i uses the key ``fold_in(key(seed), i)``.

    ``mesh`` (``specjax.decode.parallel.make_mesh``; None = one device) splits each batch over its
    ``data`` axis (padded with finished rows to a multiple of it) and the target's heads and MLP
    columns over its ``model`` axis; the loop is still one jitted call, and the tokens and
    counters are those of one device.

    ``fallback`` (``specjax.decode.fallback.Fallback``): take autoregressive steps while the
    speculative ones emit too few tokens to pay; still exact (the choice reads only earlier
    steps). None = every step speculates.

    ``keep_compiled``: how many compiled loops this process keeps between calls (least recently
    used dropped first); a table that alternates between more settings than that recompiles.

    ``shared_prompt=True`` says every prompt is the same (n samples of one prompt, as the
    losslessness audit draws): the prompt is prefilled once per batch and broadcast instead of
    once per row, which matters when the generations are short (the audit's 2-token runs on
    SmolLM2: 17-40 % of the wall time). Each row keeps its own key, so the tokens have the same
    law as without it (prefill at batch 1 may round differently from the batched one).
    """
    sampling = Sampling() if sampling is None else sampling
    target, verifier, dmodule, ids = _resolve(target, prompts, draft, drafter, verifier,
                                              max_new_tokens, chat, shared_prompt)
    batches = _plan_batches(ids, batch_size, seed, mesh, target)
    prep, batches = _prepare(target, dmodule, drafter, verifier, sampling, max_new_tokens,
                             batches, mesh=mesh, shared_prompt=shared_prompt, fallback=fallback,
                             compiler_options=compiler_options, keep_compiled=keep_compiled,
                             progress=progress)
    outs, wall, prefill = [], [], []
    for b in _calls(len(batches.arrays), progress, "generate"):
        out, p, w = _time_call(prep, batches, b)
        outs.append(out)
        prefill.append(p)
        wall.append(w)
    result = _collect(prep, batches, target, ids, outs, wall, prefill)
    if breakdown:
        _add_breakdown(result, prep, batches, compiler_options, progress)
    return result


@dataclass
class Comparison:
    """Speculative and autoregressive decoding of the same prompts, timed interleaved.

    ``seconds[mode]`` is ``[prompts, repeats]``: each prompt's wall time (its call's, at batch
    1 its own) in every timing repeat; the results' times are the means over the repeats.
    ``speedup`` and ``decode_speedup`` are (point, low, high) of the ratio of the two modes'
    tokens per second, end to end and with the prefill left out, the interval a paired
    percentile bootstrap over prompts and timing repeats (``eval.bootstrap``); ``sign_flip_p``
    is the exact paired sign-flip p of the per-prompt log ratio (``eval.paired``): at few
    prompts the bootstrap interval is too narrow, and the two are read together.
    """

    speculative: GenerationResult
    autoregressive: GenerationResult
    repeats: int
    seconds: dict
    prefill_seconds: dict
    speedup: tuple[float, float, float]
    decode_speedup: tuple[float, float, float]
    sign_flip_p: float


def compare(target, prompts, *, draft=None, drafter, verifier=None, sampling=None,
            max_new_tokens: int = 128, seed: int = 0, chat: bool = False,
            batch_size: int | None = None, repeats: int = 1, progress: bool = True,
            compiler_options: dict | None = None, breakdown: bool = False, mesh=None,
            fallback=None, keep_compiled: int = KEEP_COMPILED) -> Comparison:
    """``generate`` speculatively and autoregressively on the same prompts and seed, the two
    timed call by call in alternating order (AR first on even calls of even repeats, then SD
    first, ...), ``repeats`` times. A machine whose speed drifts (another process, its clock;
    one AR pass took 83 s and the next 52 s on the same prompts of a VM) then slows both modes
    alike, instead of whichever ran in the slow minute. Every repeat must decode the same
    tokens as the first (same seed, same programs); the arguments are ``generate``'s."""
    if not (isinstance(repeats, int) and repeats >= 1):
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    sampling = Sampling() if sampling is None else sampling
    target, verifier, dmodule, ids = _resolve(target, prompts, draft, drafter, verifier,
                                              max_new_tokens, chat, False)
    plan = _plan_batches(ids, batch_size, seed, mesh, target)
    common = dict(mesh=mesh, shared_prompt=False, compiler_options=compiler_options,
                  keep_compiled=keep_compiled, progress=progress)
    modes = {"speculative": _prepare(target, dmodule, drafter, verifier, sampling,
                                     max_new_tokens, plan, fallback=fallback, **common),
             "autoregressive": _prepare(target, None, None, None, sampling, max_new_tokens,
                                        plan, fallback=None, **common)}
    n_calls = len(plan.arrays)
    outs = {m: [None] * n_calls for m in modes}
    wall = {m: np.zeros((n_calls, repeats)) for m in modes}
    prefill = {m: np.zeros((n_calls, repeats)) for m in modes}
    for r in range(repeats):
        for b in _calls(n_calls, progress, f"compare, repeat {r + 1}/{repeats}"):
            order = list(modes) if (r + b) % 2 else list(modes)[::-1]
            for m in order:
                prep, batches = modes[m]
                out, prefill[m][b, r], wall[m][b, r] = _time_call(prep, batches, b)
                if outs[m][b] is None:
                    outs[m][b] = out
                elif not np.array_equal(out["history"], outs[m][b]["history"]):
                    raise RuntimeError(f"compare: {m} call {b} decoded other tokens in timing "
                                       f"repeat {r + 1} than in the first (nondeterminism)")
    results = {m: _collect(modes[m][0], modes[m][1], target, ids, outs[m],
                           list(wall[m].mean(axis=1)), list(prefill[m].mean(axis=1)))
               for m in modes}
    if breakdown:
        _add_breakdown(results["speculative"], *modes["speculative"], compiler_options, progress)
    per_prompt = {m: np.repeat(wall[m], plan.size, axis=0)[: len(ids)] for m in modes}
    per_prefill = {m: np.repeat(prefill[m], plan.size, axis=0)[: len(ids)] for m in modes}
    tokens = {m: np.array([p["new_tokens"] for p in results[m].per_prompt], float)
              for m in modes}
    return Comparison(
        speculative=results["speculative"], autoregressive=results["autoregressive"],
        repeats=repeats, seconds=per_prompt, prefill_seconds=per_prefill,
        speedup=speedup_interval(tokens, per_prompt),
        decode_speedup=speedup_interval(
            tokens, {m: per_prompt[m] - per_prefill[m] for m in modes}),
        sign_flip_p=_sign_flip(tokens, per_prompt))


def speedup_interval(tokens: dict, seconds: dict) -> tuple[float, float, float]:
    """(point, low, high): speculative over autoregressive tokens per second, ratio of sums over
    prompts (``tokens[mode]`` [n], ``seconds[mode]`` [n, R]), paired bootstrap over prompts and
    timing repeats (``eval.bootstrap``)."""
    from specjax.eval import bootstrap

    sd = bootstrap.ratio(tokens["speculative"], seconds["speculative"])
    ar = bootstrap.ratio(tokens["autoregressive"], seconds["autoregressive"])
    n, R = seconds["speculative"].shape
    return bootstrap.estimate(lambda idx, rep=None: sd(idx, rep) / ar(idx, rep), n,
                              rep=bootstrap.resample_repeats(R))


def _sign_flip(tokens: dict, seconds: dict) -> float:
    """Exact paired sign-flip p of the per-prompt log speed ratio (means over repeats)."""
    from specjax.eval.paired import sign_flip_p

    rate = {m: tokens[m] / seconds[m].mean(axis=1) for m in tokens}
    return sign_flip_p(np.log(rate["speculative"] / rate["autoregressive"]))
