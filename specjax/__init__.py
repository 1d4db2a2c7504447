"""specjax: speculative decoding in JAX with exactly-checked verifiers."""

from specjax.api import GenerationResult, generate
from specjax.sampling import Sampling

__all__ = ["GenerationResult", "Sampling", "generate"]
