"""specjax: speculative decoding in JAX with exactly-checked verifiers."""

from specjax.api import GenerationResult, generate
from specjax.models.loader import LoadedModel
from specjax.models.sampling import Sampling
from specjax.registry import load_model

__all__ = ["GenerationResult", "LoadedModel", "Sampling", "generate", "load_model"]
