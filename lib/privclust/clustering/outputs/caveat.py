"""A note about a released figure, as results and sweeps carry it in their `warnings`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Caveat:
    """One note about a released figure: a stable `code` and a sentence that explains it."""

    code: str
    detail: str
