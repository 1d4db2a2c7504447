"""Decode the same prompts on one device and on forced-CPU meshes; print every result as JSON.

Run by ``test_parallel.py`` in a subprocess, because the device count is fixed when JAX starts
(``XLA_FLAGS=--xla_force_host_platform_device_count=8``). The test compares the runs; this
script only produces them. ``quick`` (the default suite):

- the tabular toy pair on a (data=8) mesh: ``greedy_block`` (single draft, stateful) greedy,
  ``specinfer`` (K=2) at T=1;
- a tiny random decoder (8 query / 4 KV heads, so 4 divides both) on a (data=2, model=4) mesh:
  ``token`` greedy (n-gram drafts), ``traversal`` (K=2, early-exit drafts) at T=1, and its
  logits with split weights; ``token`` greedy again with its weights packed for the CPU
  kernel (float32 and int8), whose FFI call XLA runs on gathered weights.

``full`` (marked slow) adds every registered verifier on the toy pair, greedy and at T=1, and
autoregressive decoding.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("SPECJAX_TEST_XLA_FLAGS", ""),
                                                 "--xla_force_host_platform_device_count=8"]))
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from algorithms.verifiers import get_verifier, list_verifiers  # noqa: E402
from specjax import generate  # noqa: E402
from specjax.decode.engine import DecodeLoop  # noqa: E402
from specjax.decode.parallel import make_mesh, shard_params  # noqa: E402
from specjax.drafters import EarlyExitDrafter, ModelDrafter, NgramDrafter  # noqa: E402
from specjax.eval.metrics import TIMINGS  # noqa: E402
from specjax.models.config import tiny_config  # noqa: E402
from specjax.models.decoder import Decoder  # noqa: E402
from specjax.models.sampling import Sampling  # noqa: E402
from specjax.models.toy import ToyLoaded, load_toy  # noqa: E402

FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
# 6 prompts: not a multiple of 8, so the data axis also gets finished padding rows.
PROMPTS = [[1, 2, 3, 1, 2, 3, 1], [0], [3, 1, 2, 0, 0, 2], [5, 6], [7, 7, 7], [2]]
TINY = tiny_config("qwen2", num_heads=8, num_kv_heads=4)  # 2 layers, qwen2: bias, untied head


def run(target, draft, drafter, verifier, temperature, mesh):
    res = generate(target, PROMPTS, draft=draft, drafter=drafter, verifier=verifier,
                   sampling=Sampling(temperature=temperature), max_new_tokens=8, seed=1,
                   compiler_options=FAST, progress=False, mesh=mesh)
    counters = [{k: v for k, v in p.items() if k not in TIMINGS} for p in res.per_prompt]
    return {"tokens": res.tokens, "counters": counters}


def toy_cases(full: bool):
    if not full:
        return [("greedy_block", 1, 0.0), ("specinfer", 2, 1.0)]
    out = [(None, 0, t) for t in (0.0, 1.0)]
    for name in list_verifiers():
        K = 1 if get_verifier(name).max_drafts == 1 else 2
        out += [(name, K, t) for t in (0.0, 1.0)]
    return out


def main(mode: str) -> None:
    out = {"devices": jax.device_count(), "skipped": []}
    toy = load_toy("toy-target-v8"), load_toy("toy-draft-v8")
    tiny = ToyLoaded(name="tiny-target", model=Decoder.random(TINY, seed=0))
    packed = ToyLoaded(name="tiny-packed", model=Decoder.random(TINY, seed=0, packed=True))
    int8 = ToyLoaded(name="tiny-int8", model=Decoder.random(TINY, seed=0, weight_format="int8"))
    data8, tp = make_mesh(8, 1), make_mesh(2, 4)
    cases = [(f"toy_{v or 'ar'}_K{K}_T{t:g}", toy, v and ModelDrafter(K=K, L=3 if K == 1 else 2),
              v, t, data8) for v, K, t in toy_cases(mode == "full")]
    cases += [
        ("tiny_token_T0", (tiny, None), NgramDrafter(K=1, L=2), "token", 0.0, tp),
        ("tiny_traversal_K2_T1", (tiny, None), EarlyExitDrafter(K=2, L=2, num_layers=1),
         "traversal", 1.0, tp),
        # the CPU kernel's packed weights (float32, fused q/k/v and gate/up; int8) under SPMD
        ("tiny_packed_token_T0", (packed, None), NgramDrafter(K=1, L=2), "token", 0.0, tp),
        ("tiny_int8_token_T0", (int8, None), NgramDrafter(K=1, L=2), "token", 0.0, tp),
    ]
    for name, (target, draft), drafter, verifier, temperature, mesh in cases:
        try:
            one = run(target, draft, drafter, verifier, temperature, None)
        except ValueError as e:  # a pairing the engine refuses (e.g. greedy_draft needs its own)
            out["skipped"].append(f"{name}: {e}")
            continue
        out[name] = {"one": one, "mesh": run(target, draft, drafter, verifier, temperature, mesh)}

    # The split weights themselves: where they live, and the logits they give.
    graph, state = nnx.split(tiny.model)
    split = shard_params(state, tp, tensor_parallel=True)
    wq = split["layers"][0]["wq"][...]
    logits = jax.jit(lambda s, t: nnx.merge(graph, s).logits(t))
    tokens = jnp.asarray(PROMPTS[0] + PROMPTS[2], jnp.int32)
    one, many = np.asarray(logits(state, tokens)), np.asarray(logits(split, tokens))
    out["tp_weights"] = {
        "wq_shape": list(wq.shape),
        "wq_shard_shapes": sorted({tuple(s.data.shape) for s in wq.addressable_shards}),
        "logits_max_abs_diff": float(np.max(np.abs(one - many))),
        "logits_max_abs": float(np.max(np.abs(one))),
    }
    # The KV cache the loop carries: sequences over data, heads over model.
    loop = DecodeLoop(target_graph=graph, draft_graph=None, drafter=None, verifier=None,
                      sampling=Sampling(), vocab_size=TINY.vocab_size, eos_ids=(),
                      max_new_tokens=4, prompt_pad=8, mesh=tp)

    def init(s, prompts, lengths, keys):
        target = nnx.merge(graph, s)
        return loop.shard(jax.vmap(lambda *a: loop.init(target, None, *a))(prompts, lengths, keys))

    st = jax.jit(init)(split, np.zeros((4, 8), np.int32), np.full((4,), 3, np.int32),
                       np.zeros((4, 2), np.uint32))

    def shard_shapes(x):
        return sorted({tuple(s.data.shape) for s in x.addressable_shards})

    k = st.cache.k[0]
    out["tp_cache"] = {"k_shape": list(k.shape), "k_shard_shapes": shard_shapes(k),
                       "history_shard_shapes": shard_shapes(st.history)}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "quick")
