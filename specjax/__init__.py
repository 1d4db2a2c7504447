"""specjax: speculative decoding in JAX with exactly-checked verifiers."""

from specjax.sampling import Sampling

__all__ = ["Sampling"]
