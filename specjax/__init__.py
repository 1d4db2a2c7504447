"""specjax: speculative decoding in JAX with exactly-checked verifiers."""

from specjax.api import Comparison, GenerationResult, compare, generate
from specjax.models.loader import LoadedModel
from specjax.models.sampling import Sampling
from specjax.registry import load_model

__all__ = ["Comparison", "GenerationResult", "LoadedModel", "Sampling", "compare", "generate",
           "load_model"]
