"""A verifier wrapped by a probe: the wrapped verifier's claims, read through the wrapper.

Why: a probe (``RootBoundProbe``, ``InputRecorder``) must look to the engine and its input
checks exactly like the verifier it wraps, so its claims cannot be restated by hand per probe.
"""

from __future__ import annotations


class WrapsVerifier:
    """Mixin for a dataclass with a ``verifier`` field: forwards the verifier contract's claims
    and ``init_state``; a subclass overrides what it adds."""

    verifier: object

    @property
    def lossless(self) -> bool:
        return self.verifier.lossless

    @property
    def max_drafts(self) -> int | None:
        return self.verifier.max_drafts

    @property
    def draft_structures(self):
        from algorithms.verifiers.base import accepted_structures

        return accepted_structures(self.verifier)

    def init_state(self, L: int, V: int):
        return self.verifier.init_state(L, V)
