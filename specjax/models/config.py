"""Hyperparameters of the decoder family (Llama / Qwen2 / Qwen3 / Mistral / SmolLM), and tiny
presets for tests.

The field names are the canonical dict that the GGUF reader
(``specjax.models.gguf_weights.read_gguf``) produces, so a real model is ``ModelConfig(**hparams)``.
Only what changes the computation is here; the tokenizer carries its own special ids, and
``bos_id``/``eos_ids`` are repeated for the engine's stop rule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

ARCHS = ("llama", "qwen2", "qwen3", "mistral", "gemma3")
# gemma3 is accepted by the config, not yet by the decoder
IMPLEMENTED_ARCHS = ("llama", "qwen2", "qwen3", "mistral")
#: RoPE frequency rules: HF ``rope_scaling.rope_type`` values the decoder computes.
ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    arch: str
    vocab_size: int
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    qkv_bias: bool = False
    qk_norm: bool = False  # Qwen3: an RMSNorm over each head's q and k, before RoPE
    # HF ``rope_scaling`` as sorted (key, value) pairs (hashable: a static jit argument);
    # () = the plain theta^(-2i/hd) frequencies. ``rope_frequencies`` reads it.
    rope_scaling: tuple[tuple[str, float | str], ...] = ()
    tie_embeddings: bool = True
    context_length: int = 2048
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = ()

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError(f"config.arch must be one of {ARCHS}, got {self.arch!r}")
        for name in (
            "vocab_size",
            "num_layers",
            "hidden_size",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "context_length",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ValueError(f"config.{name} must be an integer >= 1, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"config.num_heads ({self.num_heads}) must be a multiple of "
                f"config.num_kv_heads ({self.num_kv_heads}) for grouped-query attention"
            )
        if self.head_dim % 2:
            raise ValueError(f"config.head_dim must be even for RoPE, got {self.head_dim}")
        if not self.rope_theta > 0:
            raise ValueError(f"config.rope_theta must be > 0, got {self.rope_theta}")
        if not self.rms_eps > 0:
            raise ValueError(f"config.rms_eps must be > 0, got {self.rms_eps}")
        # Lists from JSON/YAML become tuples so the config stays hashable (a static jit argument).
        object.__setattr__(self, "eos_ids", tuple(int(i) for i in self.eos_ids))
        scaling = dict(self.rope_scaling)
        rope_type = scaling.get("rope_type", "default")
        if rope_type not in ROPE_TYPES:
            raise ValueError(f"config.rope_scaling: rope_type {rope_type!r} is not implemented; "
                             f"allowed: {ROPE_TYPES}")
        object.__setattr__(self, "rope_scaling", tuple(sorted(scaling.items())))
        object.__setattr__(self, "rope_theta", float(self.rope_theta))
        object.__setattr__(self, "rms_eps", float(self.rms_eps))

    @property
    def num_params(self) -> int:
        """Parameter count (the float32 bandwidth floor of decoding is 4 bytes per parameter)."""
        D, F, hd = self.hidden_size, self.intermediate_size, self.head_dim
        q, kv = self.num_heads * hd, self.num_kv_heads * hd
        per_layer = D * (q + 2 * kv) + q * D + 3 * D * F + 2 * D
        if self.qkv_bias:
            per_layer += q + 2 * kv
        if self.qk_norm:
            per_layer += 2 * hd
        head = 0 if self.tie_embeddings else D * self.vocab_size
        return self.vocab_size * D + self.num_layers * per_layer + D + head

    @property
    def streamed_params(self) -> int:
        """Parameters every token's forward multiplies, i.e. reads in full at decode: all but an
        untied input embedding table, of which a token reads one row. The roofline's weight
        bytes (4 per parameter) and FLOPs (2 per parameter per token) count these."""
        return self.num_params - (0 if self.tie_embeddings else self.vocab_size * self.hidden_size)

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)


_TINY = {
    # Llama-like (SmolLM2 shape in miniature): tied head, grouped-query attention, no biases.
    "llama": dict(
        arch="llama",
        vocab_size=67,
        num_layers=3,
        hidden_size=48,
        num_heads=6,
        num_kv_heads=2,
        head_dim=8,
        intermediate_size=80,
        rope_theta=10000.0,
        rms_eps=1e-5,
        qkv_bias=False,
        tie_embeddings=True,
        context_length=128,
        bos_id=1,
        eos_ids=(2,),
    ),
    # Qwen2-like: qkv bias, separate lm_head, large rope base, grouped-query attention.
    "qwen2": dict(
        arch="qwen2",
        vocab_size=71,
        num_layers=2,
        hidden_size=32,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=64,
        rope_theta=1_000_000.0,
        rms_eps=1e-6,
        qkv_bias=True,
        tie_embeddings=False,
        context_length=128,
        bos_id=None,
        eos_ids=(3, 4),
    ),
}


def tiny_config(preset: str = "llama", **overrides) -> ModelConfig:
    """A few-thousand-parameter config for tests; same code path as the real models."""
    if preset not in _TINY:
        raise ValueError(f"tiny_config preset must be one of {sorted(_TINY)}, got {preset!r}")
    return ModelConfig(**{**_TINY[preset], **overrides})
