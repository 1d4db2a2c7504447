"""One benchmark prompt: what every prompt source (bundled suites, a user's file) yields."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Prompt:
    """One benchmark prompt. Only the first user turn is used: later MT-Bench turns refer to the
    model's own first answer, which differs between runs."""

    id: str
    text: str
    category: str = ""
    reference: str | None = None
