"""Input errors of the clustering library, each naming the offending argument."""

from __future__ import annotations


class ClusteringInputError(ValueError):
    """An argument of a clustering call is invalid; `field` names it ("X", "k", "radius", ...).

    A `ValueError` so plain callers can catch it generically, with `field` so the API can answer
    with a 422 problem that names the parameter at fault.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
