"""The names a caller chooses from: the clustering algorithms and the neighbouring relations
(with what a relation means for the sensitivity of counts and sums).

Each name is written here once; everything else (the planner's checks, the registry of methods,
the CLI's choices, the service's schemas and metrics labels) derives from these enums. A
StrEnum member is a `str` and compares equal to its value, so "pe-means" and
`Algorithm.PE_MEANS` are interchangeable wherever a name is read; what the library hands back
(`RunPlan.algorithm`, `ClusteringResult.algorithm`, `.relation`) is the plain value.
"""

from __future__ import annotations

import math
from enum import StrEnum


class Algorithm(StrEnum):
    """A clustering method, or AUTO: the rule that picks one (privclust.clustering.auto)."""

    AUTO = "auto"
    PE_MEANS = "pe-means"
    HDPE_MEANS = "hdpe-means"
    FASTLLOYD = "fastlloyd"
    LSH_CORESET = "lsh-coreset"
    PE_LLOYD = "pe-lloyd"


class Relation(StrEnum):
    """Which datasets are neighbours. ADD_REMOVE (the default): one row more or less, so the row
    count is private; REPLACE_ONE: one row changed, when the owner declared the count public."""

    ADD_REMOVE = "add-remove"
    REPLACE_ONE = "replace-one"

    @property
    def count_sensitivity(self) -> float:
        """l2 sensitivity of a vector of counts (a vote histogram, per-cluster counts): a row
        added or removed changes one count by 1; a row replaced, two counts by 1."""
        return math.sqrt(2.0) if self is Relation.REPLACE_ONE else 1.0

    @property
    def sum_sensitivity_factor(self) -> float:
        """A sum of rows in a ball of radius R changes by R (add/remove) or 2R (replace-one)."""
        return 2.0 if self is Relation.REPLACE_ONE else 1.0


# Every choice, "auto" first, in the order the errors and the CLI list them.
ALGORITHMS: tuple[Algorithm, ...] = tuple(Algorithm)
RELATIONS: tuple[Relation, ...] = tuple(Relation)
