"""Differentially private k-means: PE-means, HDPE-means, FastLloyd, an LSH-tree private coreset
and pe-lloyd (PE-means then noisy Lloyd steps), pure numpy/scipy/scikit-learn.

Public entry points: `pe_means`, `hdpe_means`, `fastlloyd`, `lsh_coreset`, `pe_lloyd` and
`cluster` (which resolves algorithm="auto" by `choose_algorithm`), returning a
`ClusteringResult`; `plan_run` prices and validates a job from public inputs only;
`cluster(..., summaries=True)` adds private cluster sizes and loss, and `sweep` runs one
summarised job per k and suggests one; `ClusteringInputError` names the argument at fault.
Public: d, k, the declared domain and the released noisy row count N~ (the exact N only when the
owner declared it public, which makes neighbouring datasets replace one row instead of adding or
removing one).
"""

from privclust.clustering.auto import (
    AUTO_HDPE_ABOVE_DIM,
    AUTO_PE_LLOYD_MAX_MU_HIGH_DIM,
    choose_algorithm,
)
from privclust.clustering.choices import ALGORITHMS, RELATIONS, Algorithm, Relation
from privclust.clustering.dispatch import cluster
from privclust.clustering.errors import ClusteringInputError
from privclust.clustering.fastlloyd import fastlloyd
from privclust.clustering.hdpe import hdpe_means
from privclust.clustering.lsh_coreset import lsh_coreset
from privclust.clustering.params import (
    DEFAULT_MAX_POPULATION,
    DEFAULT_PROJECTION_DIM,
    RunPlan,
    plan_run,
    resolve_algorithm,
)
from privclust.clustering.pe import pe_means
from privclust.clustering.pe_lloyd import pe_lloyd
from privclust.clustering.result import ClusteringResult
from privclust.clustering.summaries import SweepResult, suggest_k, sweep

__all__ = [
    "ALGORITHMS",
    "AUTO_HDPE_ABOVE_DIM",
    "AUTO_PE_LLOYD_MAX_MU_HIGH_DIM",
    "DEFAULT_MAX_POPULATION",
    "DEFAULT_PROJECTION_DIM",
    "RELATIONS",
    "Algorithm",
    "ClusteringInputError",
    "ClusteringResult",
    "Relation",
    "RunPlan",
    "SweepResult",
    "choose_algorithm",
    "cluster",
    "fastlloyd",
    "hdpe_means",
    "lsh_coreset",
    "pe_lloyd",
    "pe_means",
    "plan_run",
    "resolve_algorithm",
    "suggest_k",
    "sweep",
]
