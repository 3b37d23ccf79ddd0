"""The estimate's job duration (app.jobs.duration): more work takes longer, every method has a
cost, and the range holds the figure (wider on Dask)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.jobs.duration import COSTS, PlanFacts, expected_duration, work_units
from privclust.clustering import Algorithm

FACTS = PlanFacts(
    algorithm=Algorithm.PE_LLOYD, n_rows=50_000, n_cols=7, k=6, iterations=10,
    population_size=1542, projection_dim=None, lloyd_steps=1,
)  # fmt: skip


def test_every_method_has_a_cost() -> None:
    assert set(COSTS) == {a.value for a in Algorithm if a != Algorithm.AUTO}


@pytest.mark.parametrize("method", sorted(a.value for a in Algorithm if a != Algorithm.AUTO))
def test_more_rows_or_iterations_take_longer(method: str) -> None:
    base = replace(FACTS, algorithm=method)
    for bigger in (
        replace(base, n_rows=2 * base.n_rows),
        replace(base, iterations=2 * base.iterations),
    ):
        assert work_units(bigger) > work_units(base)
        assert expected_duration(bigger, "local").seconds > expected_duration(base, "local").seconds


def test_what_each_method_pays_for() -> None:
    # A Lloyd step compares each row with k centres; FastLloyd and LSH levels read d columns;
    # a PE vote's search grows with the population (its log), which calibration found to
    # matter more than d.
    assert work_units(replace(FACTS, lloyd_steps=4)) > work_units(FACTS)
    assert work_units(replace(FACTS, k=12)) > work_units(FACTS)
    assert work_units(replace(FACTS, population_size=8192)) > work_units(FACTS)
    for method in (Algorithm.FASTLLOYD, Algorithm.LSH_CORESET):
        base = replace(FACTS, algorithm=method)
        assert work_units(replace(base, n_cols=14)) > work_units(base)


def test_the_range_holds_the_figure_and_is_wider_on_dask() -> None:
    local, dask = expected_duration(FACTS, "local"), expected_duration(FACTS, "dask")
    assert local.low < local.seconds < local.high and local.engine == "local"
    assert dask.seconds == local.seconds
    assert dask.high / dask.low > local.high / local.low
