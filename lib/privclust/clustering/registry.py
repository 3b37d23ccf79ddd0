"""The registry of clustering methods: each `Algorithm` name maps to its method (its plan, its
sensitivity, its run), so the planner and the dispatcher never branch on a name."""

from __future__ import annotations

from privclust.clustering.choices import Algorithm
from privclust.clustering.methods import fastlloyd, hdpe, lsh_coreset, pe, pe_lloyd
from privclust.clustering.run.method import Method

METHODS: dict[Algorithm, Method] = {
    module.METHOD.name: module.METHOD for module in (pe, hdpe, fastlloyd, lsh_coreset, pe_lloyd)
}
