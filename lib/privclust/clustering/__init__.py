"""Differentially private k-means: PE-means, HDPE-means, FastLloyd, an LSH-tree private coreset
and pe-lloyd (PE-means then noisy Lloyd steps), pure numpy/scipy/scikit-learn.

Public entry points: `pe_means`, `hdpe_means`, `fastlloyd`, `lsh_coreset`, `pe_lloyd` and
`cluster` (which resolves algorithm="auto" by `choose_algorithm`), returning a
`ClusteringResult`; `plan_run` prices and validates a job from public inputs only;
`cluster(..., summaries=True)` adds private cluster sizes and loss, and `sweep` runs one
summarised job per k and suggests one; `ClusteringInputError` names the argument at fault.
`Algorithm` and `Relation` are the names a caller chooses from.
Public: d, k, the declared domain and the released noisy row count N~ (the exact N only when the
owner declared it public, which makes neighbouring datasets replace one row instead of adding or
removing one).

The package, floor by floor (each imports only the floors below it): choices and errors, the
vocabulary; data/ (the domain's limits and scales, the rows and their passes); run/ (options,
the plan and the summaries' price, the method protocol, the runner, the result); evolution/
(private evolution's population, vote, histogram and selection); mechanisms/ (grid sums, the
Lloyd step, the LSH tree, the projected stage); methods/ (one module per method) and outputs/
(summaries, uncertainty, expected accuracy); auto, registry, dispatch (plan_run, cluster) and
sweeps on top. The public names are the ones listed here, and only here.

The names below are loaded on first use: reading `Algorithm` (a CLI's choices, a service's
schemas) does not import numpy, scipy or scikit-learn.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from privclust.clustering.choices import ALGORITHMS, RELATIONS, Algorithm, Relation

if TYPE_CHECKING:  # the names, for type checkers (re-exported)
    from privclust.clustering.auto import AUTO_ALGORITHM as AUTO_ALGORITHM
    from privclust.clustering.auto import choose_algorithm as choose_algorithm
    from privclust.clustering.auto import resolve_algorithm as resolve_algorithm
    from privclust.clustering.data.domain import clip_into_ball as clip_into_ball
    from privclust.clustering.data.domain import prepare_rows as prepare_rows
    from privclust.clustering.dispatch import cluster as cluster
    from privclust.clustering.dispatch import plan_run as plan_run
    from privclust.clustering.errors import ClusteringInputError as ClusteringInputError
    from privclust.clustering.methods.fastlloyd import fastlloyd as fastlloyd
    from privclust.clustering.methods.hdpe import hdpe_means as hdpe_means
    from privclust.clustering.methods.lsh_coreset import lsh_coreset as lsh_coreset
    from privclust.clustering.methods.pe import pe_means as pe_means
    from privclust.clustering.methods.pe_lloyd import pe_lloyd as pe_lloyd
    from privclust.clustering.outputs.summaries import (
        nearest_centre_blocks as nearest_centre_blocks,
    )
    from privclust.clustering.run.options import DEFAULT_MAX_POPULATION as DEFAULT_MAX_POPULATION
    from privclust.clustering.run.options import DEFAULT_PROJECTION_DIM as DEFAULT_PROJECTION_DIM
    from privclust.clustering.run.options import SWEEP_SUMMARY_FRACTION as SWEEP_SUMMARY_FRACTION
    from privclust.clustering.run.plan import RunPlan as RunPlan
    from privclust.clustering.run.result import ClusteringResult as ClusteringResult
    from privclust.clustering.sweeps import SweepResult as SweepResult
    from privclust.clustering.sweeps import suggest_k as suggest_k
    from privclust.clustering.sweeps import sweep as sweep

# The names each module defines for the package (loaded on first use, see __getattr__).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "privclust.clustering.auto": (
        "AUTO_ALGORITHM",
        "choose_algorithm",
        "resolve_algorithm",
    ),
    "privclust.clustering.dispatch": ("cluster", "plan_run"),
    "privclust.clustering.data.domain": ("clip_into_ball", "prepare_rows"),
    "privclust.clustering.errors": ("ClusteringInputError",),
    "privclust.clustering.methods.fastlloyd": ("fastlloyd",),
    "privclust.clustering.methods.hdpe": ("hdpe_means",),
    "privclust.clustering.methods.lsh_coreset": ("lsh_coreset",),
    "privclust.clustering.methods.pe": ("pe_means",),
    "privclust.clustering.methods.pe_lloyd": ("pe_lloyd",),
    "privclust.clustering.run.options": (
        "DEFAULT_MAX_POPULATION",
        "DEFAULT_PROJECTION_DIM",
        "SWEEP_SUMMARY_FRACTION",
    ),
    "privclust.clustering.run.plan": ("RunPlan",),
    "privclust.clustering.run.result": ("ClusteringResult",),
    "privclust.clustering.outputs.summaries": ("nearest_centre_blocks",),
    "privclust.clustering.sweeps": ("SweepResult", "suggest_k", "sweep"),
}
_HOMES = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'privclust.clustering' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later reads skip this function
    return value


__all__ = ["ALGORITHMS", "RELATIONS", "Algorithm", "Relation", *_HOMES]
