"""A run's method and budget as the library's entry points take them (`cluster`, `sweep`,
`plan_run`), whoever asks: a job's request, a sweep's, or `privclust cluster`'s arguments."""

from __future__ import annotations

from typing import Any, Protocol


class MethodChoice(Protocol):
    """The method, the budget (epsilon or mu) and the method's parameters a run was asked for
    (each None when not given), read-only: a frozen request and an argparse namespace both
    qualify."""

    @property
    def algorithm(self) -> str: ...
    @property
    def epsilon(self) -> float | None: ...
    @property
    def mu(self) -> float | None: ...
    @property
    def iterations(self) -> int | None: ...
    @property
    def variations(self) -> int | None: ...
    @property
    def projection_dim(self) -> int | None: ...


def library_keywords(choice: MethodChoice, delta: float | None) -> dict[str, Any]:
    """The library's keywords for `choice`: delta goes with epsilon only (a budget given as mu
    has none)."""
    return {
        "algorithm": choice.algorithm,
        "epsilon": choice.epsilon,
        "delta": delta if choice.epsilon is not None else None,
        "mu": choice.mu,
        "iterations": choice.iterations,
        "variations": choice.variations,
        "projection_dim": choice.projection_dim,
    }
