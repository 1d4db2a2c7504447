"""specjax: speculative decoding in JAX with exactly-checked verifiers."""

from specjax.api import GenerationResult, generate
from specjax.models.loader import LoadedModel
from specjax.registry import load_model
from specjax.sampling import Sampling

__all__ = ["GenerationResult", "LoadedModel", "Sampling", "generate", "load_model"]
