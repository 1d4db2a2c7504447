"""The contract between language models and the decode engine.

One primitive, ``forward``, serves prefill, one-token decode, drafting K branches and scoring a
whole draft tree, because all four are "run some new nodes that attend to the committed cache and
to some earlier new nodes". The models are written for ONE sequence (no batch axis); the engine
``jax.vmap``s over the batch, so prompts of different lengths need no padding logic in the model.

Cache layout (per sequence, static shapes): ``max_len`` committed slots followed by ``scratch``
slots. Committed entries ``[0, length)`` hold the KV of every consumed token. New nodes write
their KV into scratch slots; ``commit`` copies the KV of an accepted path from scratch to
``[length, length + n)`` and advances ``length``. The engine keeps the *pending* token (the last
emitted token, whose KV is not yet in the cache) and feeds it as the root of the next step.
"""

from __future__ import annotations

from typing import Any, Protocol

from jaxtyping import Array, Bool, Float, Int

Cache = Any  # a pytree (flax.struct.dataclass) with at least a scalar int32 field ``length``


class CausalLM(Protocol):
    """An nnx.Module (or anything splittable with nnx.split) implementing the model contract."""

    vocab_size: int
    max_len: int  # committed capacity of caches this model makes by default

    def init_cache(self, max_len: int, scratch: int) -> Cache:
        """Empty cache: ``length == 0``; KV arrays sized ``max_len + scratch``."""

    def with_scratch(self, cache: Cache, scratch: int) -> Cache:
        """The same committed entries with a fresh, empty scratch block of ``scratch`` slots.

        Every step attends over the whole scratch block, so a prompt-sized block (needed for a
        one-forward prefill) is swapped for a tree-sized one before decoding.
        """

    def forward(
        self,
        tokens: Int[Array, " N"],
        positions: Int[Array, " N"],
        slots: Int[Array, " N"],
        mask: Bool[Array, "N S"],
        cache: Cache,
    ) -> tuple[Float[Array, "N V"], Cache]:
        """Run N new nodes; return float32 logits for each and the cache with their KV written.

        - ``positions``: absolute RoPE positions (``cache.length + depth`` for tree nodes).
        - ``slots``: scratch slot in ``[0, S)`` each node's KV is written to.
        - ``mask[j, s]``: node j attends to scratch slot s (must include its own slot). Every
          node also attends to all committed entries ``[0, cache.length)``; nothing else.
        """

    def commit(self, cache: Cache, slots: Int[Array, " M"], n: Int[Array, ""]) -> Cache:
        """Move scratch slots ``slots[:n]`` to committed positions ``length .. length+n-1``."""
