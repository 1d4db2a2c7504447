"""Tabular toy language models: the engine's test bench with an exactly known law.

The next-token law depends only on the last ``order`` tokens, through a table of seeded Dirichlet
laws. Small V (≤ 8) makes the law of the first N generated tokens enumerable in float64, so the
whole engine (drafter + tree scoring + verifier + commit + truncation) can be checked for
losslessness by a chi-square test against that exact law, independent of any verifier's own
exact twin. The module follows the model contract in ``specjax/models/base.py`` exactly (tree
masks, scratch slots, commit), so a cache bug in the engine shows up here as a wrong law.

Positions before the prompt (and prompt-less contexts) use the padding symbol ``V``. The model
has ``num_layers`` tables: the full model uses the last one, ``early_exit(n)`` uses table n-1,
which lets the early-exit drafter run on the toy without a real decoder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
from flax import nnx, struct
from jaxtyping import Array, Bool, Float, Int


@struct.dataclass
class ToyCache:
    tokens: Int[Array, " T"]  # committed tokens; position == index
    scratch_tokens: Int[Array, " S"]
    scratch_positions: Int[Array, " S"]
    length: Int[Array, ""]


def make_tables(V: int, order: int, seed: int, num_layers: int = 2, mix: float = 0.0,
                mix_seed: int | None = None, concentration: float = 1.0) -> np.ndarray:
    """Float64 laws [num_layers, (V+1)^order, V]; context code = sum_d c_d (V+1)^d, c_0 = last.

    ``mix`` blends the final table with an independent one (seed ``mix_seed``) so a draft model
    can be made correlated with, but different from, a target. Layer l < last is the final law
    blended with noise that shrinks with depth (a cheap stand-in for early-exit quality).
    """
    rng = np.random.default_rng(seed)
    rows = (V + 1) ** order
    final = rng.dirichlet(np.full(V, concentration), size=rows)
    if mix:
        other = np.random.default_rng(mix_seed).dirichlet(np.full(V, concentration), size=rows)
        final = (1 - mix) * final + mix * other
    tables = []
    for layer in range(num_layers - 1):
        noise = rng.dirichlet(np.ones(V), size=rows)
        w = 0.5 * (num_layers - 1 - layer) / num_layers
        tables.append((1 - w) * final + w * noise)
    tables.append(final)
    return np.stack(tables)


class _Exact:
    """Holds the float64 tables as a static attribute (hashed by content, never traced), so two
    loads of the same toy model share one compiled decode loop."""

    def __init__(self, laws: np.ndarray):
        self.laws = laws
        self._hash = hash((laws.shape, laws.tobytes()))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, _Exact) and np.array_equal(self.laws, other.laws)


class ToyLM(nnx.Module):
    """CausalLM whose logits are log(table[last `order` tokens])."""

    def __init__(self, tables: np.ndarray, order: int, layer: int | None = None):
        self.exact = _Exact(np.asarray(tables, np.float64))  # float64 tables, static (no leaf)
        self.order = order
        self.vocab_size = int(tables.shape[-1])
        self.num_layers = int(tables.shape[0])
        self.layer = self.num_layers - 1 if layer is None else layer
        self.max_len = 1024
        self.table = nnx.Param(jnp.asarray(np.log(self.exact.laws[self.layer]), jnp.float32))

    def early_exit(self, n: int) -> ToyLM:
        if not 1 <= n <= self.num_layers:
            raise ValueError(f"early_exit: num_layers must be in [1, {self.num_layers}], got {n}")
        return ToyLM(self.exact.laws, self.order, layer=n - 1)

    # --- model contract -------------------------------------------------------------------------
    def init_cache(self, max_len: int, scratch: int) -> ToyCache:
        return ToyCache(
            tokens=jnp.zeros((max_len,), jnp.int32),
            scratch_tokens=jnp.zeros((scratch,), jnp.int32),
            scratch_positions=jnp.full((scratch,), -1, jnp.int32),
            length=jnp.int32(0),
        )

    def with_scratch(self, cache: ToyCache, scratch: int) -> ToyCache:
        return cache.replace(scratch_tokens=jnp.zeros((scratch,), jnp.int32),
                             scratch_positions=jnp.full((scratch,), -1, jnp.int32))

    def forward(self, tokens: Int[Array, " N"], positions: Int[Array, " N"],
                slots: Int[Array, " N"], mask: Bool[Array, "N S"],
                cache: ToyCache) -> tuple[Float[Array, "N V"], ToyCache]:
        V = self.vocab_size
        sc_tok = cache.scratch_tokens.at[slots].set(tokens)
        sc_pos = cache.scratch_positions.at[slots].set(positions)
        code = tokens.astype(jnp.int32)
        for d in range(1, self.order):
            t = positions - d  # position of the d-th previous token of each node
            committed = cache.tokens[jnp.clip(t, 0, cache.tokens.shape[0] - 1)]
            hit = mask & (sc_pos[None, :] == t[:, None])  # the visible scratch node at t
            from_scratch = jnp.sum(jnp.where(hit, sc_tok[None, :], 0), axis=1)
            prev = jnp.where(t < 0, V, jnp.where(t < cache.length, committed, from_scratch))
            code = code + prev * (V + 1) ** d
        logits = self.table[...][code]
        return logits, cache.replace(scratch_tokens=sc_tok, scratch_positions=sc_pos)

    def commit(self, cache: ToyCache, slots: Int[Array, " M"], n: Int[Array, ""]) -> ToyCache:
        i = jnp.arange(slots.shape[0])
        dest = jnp.where(i < n, cache.length + i, cache.tokens.shape[0])  # out of range: dropped
        tokens = cache.tokens.at[dest].set(cache.scratch_tokens[slots], mode="drop")
        return cache.replace(tokens=tokens, length=cache.length + n)

    # --- exact law (float64) --------------------------------------------------------------------
    def law(self, context) -> np.ndarray:
        """Float64 next-token law after a full token context (prompt + generated)."""
        V = self.vocab_size
        ctx = [V] * self.order + [int(t) for t in context]
        code = sum(ctx[-1 - d] * (V + 1) ** d for d in range(self.order))
        return self.exact.laws[self.layer, code]

    def sequence_law(self, prompt, n: int, transform=None) -> dict[tuple[int, ...], float]:
        """Exact law of the first ``n`` generated tokens, {tokens: probability}, enumerated in
        float64; ``transform`` maps each next-token law (e.g. temperature / top-k in NumPy)."""
        law = {(): 1.0}
        for _ in range(n):
            nxt = {}
            for seq, pr in law.items():
                step = self.law(list(prompt) + list(seq))
                step = step if transform is None else transform(step)
                nxt.update({seq + (x,): pr * px for x, px in enumerate(step) if px > 0})
            law = nxt
        return law


@dataclass
class ToyTokenizer:
    """Token ids written as space-separated integers."""

    vocab_size: int
    eos_ids: tuple[int, ...] = ()
    bos_id: int | None = None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        try:
            ids = [int(t) for t in text.split()]
        except ValueError:
            raise ValueError(f"toy tokenizer: text must be space-separated token ids (the toy "
                             f"models take dataset=toy only), got {text[:40]!r}") from None
        if any(not 0 <= t < self.vocab_size for t in ids):
            raise ValueError(f"toy tokenizer: ids must be in [0, {self.vocab_size}), got {ids}")
        return ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return " ".join(str(int(t)) for t in ids)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> str:
        return " ".join(m["content"] for m in messages)


@dataclass
class ToyLoaded:
    """The LoadedModel interface around a ToyLM."""

    name: str
    model: ToyLM
    eos_ids: tuple[int, ...] = ()

    def __post_init__(self):
        self.config = None
        self.vocab_size = self.model.vocab_size
        self.tokenizer = ToyTokenizer(self.vocab_size, self.eos_ids)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids) -> str:
        return self.tokenizer.decode(ids)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt)

    def forward(self, ids) -> np.ndarray:
        ids = jnp.asarray(ids, jnp.int32)
        T = ids.shape[0]
        cache = self.model.init_cache(T, T)
        mask = jnp.tril(jnp.ones((T, T), bool))
        logits, _ = self.model.forward(ids, jnp.arange(T), jnp.arange(T), mask, cache)
        return np.asarray(logits, np.float32)

    def law(self, context) -> np.ndarray:
        return self.model.law(context)

    def sequence_law(self, prompt, n: int, transform=None) -> dict[tuple[int, ...], float]:
        return self.model.sequence_law(prompt, n, transform)


#: Context order of the named toys: the law reads the last 3 tokens, so a KV-cache error two
#: tokens back (not only at the pending token's neighbour) changes the law at T > 0 too.
#: Tables have (V+1)^3 rows: 125 at V=4, 729 at V=8.
TOY_ORDER = 3
_NAME = re.compile(r"^toy-(target|draft)(?:-v(\d+))?$")


def load_toy(name: str, *, eos_ids: tuple[int, ...] = ()) -> ToyLoaded:
    """``toy-target`` / ``toy-draft`` (V=4), optionally ``-v<V>`` with 2 ≤ V ≤ 8; order 3.

    The draft is half the target's law plus half an independent law, so drafts are accepted
    often enough to exercise long accepted prefixes and full-block bonus tokens.
    """
    m = _NAME.match(name)
    if not m or not 2 <= int(m.group(2) or 4) <= 8:
        raise ValueError(f"toy model: unknown name {name!r}; allowed: toy-target, toy-draft, "
                         "optionally with a -v<V> suffix, 2 <= V <= 8 (e.g. toy-target-v8)")
    V = int(m.group(2) or 4)
    kind = m.group(1)
    if kind == "target":
        tables = make_tables(V, order=TOY_ORDER, seed=V, num_layers=2)
    else:
        tables = make_tables(V, order=TOY_ORDER, seed=V, num_layers=2, mix=0.5,
                             mix_seed=100 + V)
    return ToyLoaded(name=name, model=ToyLM(tables, order=TOY_ORDER), eos_ids=tuple(eos_ids))


__all__ = ["ToyCache", "ToyLM", "ToyLoaded", "ToyTokenizer", "load_toy", "make_tables"]
