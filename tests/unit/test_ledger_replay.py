"""The ledger replay with the upload's `count` entry, and the dataset's planning count."""

from __future__ import annotations

import math
import uuid

import pytest
from privclust.privacy import budget as bmath

from app.datasets.service import dataset_warnings, planning_count
from app.ledger import service as ledger
from app.models import Dataset, LedgerEntry


def _entry(kind: str, mu: float | None = None, job: uuid.UUID | None = None) -> LedgerEntry:
    return LedgerEntry(dataset_id=uuid.uuid4(), kind=kind, mu=mu, job_id=job)


def _dataset(**overrides: object) -> Dataset:
    values: dict[str, object] = {
        "tenant": "acme",
        "name": "t",
        "n_rows": 1000,
        "n_rows_dp": 1013,
        "count_public": False,
        "count_mu": 0.1,
        "n_cols": 2,
        "columns": ["a", "b"],
        "center": [0.0, 0.0],
        "radius": 1.0,
        "epsilon": 3.0,
        "delta": 1e-6,
        "mu_cap": 1.0,
    }
    values.update(overrides)
    return Dataset(**values)


def test_the_count_is_spent_and_composes_with_jobs() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    state = ledger.replay(
        [
            _entry("cap", 1.0),
            _entry("count", 0.1),
            _entry("reserve", 0.5, a),
            _entry("commit", 0.5, a),
            _entry("reserve", 0.3, b),
        ]
    )
    assert state.dataset_releases == [0.1]
    assert sorted(state.spent_mus) == [0.1, 0.5]
    assert sorted(state.live_mus) == [0.1, 0.3, 0.5]
    assert state.jobs == 2  # the count is not a job
    view = ledger.view(_dataset(), state)
    assert view.mu_spent == pytest.approx(math.sqrt(0.1**2 + 0.5**2))
    assert view.mu_reserved == pytest.approx(0.3)
    assert view.mu_remaining == pytest.approx(math.sqrt(1.0 - 0.01 - 0.25 - 0.09))


def test_the_count_survives_a_refund_and_a_cap_change() -> None:
    a = uuid.uuid4()
    state = ledger.replay(
        [
            _entry("cap", 1.0),
            _entry("count", 0.6),
            _entry("reserve", 0.5, a),
            _entry("refund", 0.5, a),
            _entry("cap", 2.0),
        ]
    )
    assert state.mu_cap == 2.0 and state.live_mus == [0.6]
    # A job that would fit next to nothing does not fit next to the count.
    assert bmath.is_admissible([], 0.81, 1.0)
    assert not bmath.is_admissible(
        ledger.replay([_entry("cap", 1.0), _entry("count", 0.6)]).live_mus, 0.81, 1.0
    )


def test_a_state_copy_is_independent() -> None:
    state = ledger.replay([_entry("cap", 1.0), _entry("count", 0.1)])
    copy = state.copy()
    copy.dataset_releases.append(0.2)
    copy.reserved[uuid.uuid4()] = 0.3
    assert state.dataset_releases == [0.1] and state.reserved == {}


def test_planning_count_is_the_released_count_under_add_remove() -> None:
    count = planning_count(_dataset(n_rows=1000, n_rows_dp=1013))
    assert (count.n_rows, count.relation) == (1013, "add-remove")
    # A released count of 0 (floored) still plans with one row: post-processing of N~.
    assert planning_count(_dataset(n_rows=3, n_rows_dp=0)).n_rows == 1


def test_planning_count_is_n_when_declared_public() -> None:
    count = planning_count(_dataset(n_rows=1000, n_rows_dp=1000, count_public=True, count_mu=None))
    assert (count.n_rows, count.relation) == (1000, "replace-one")


def test_delta_above_one_over_the_released_count_is_warned_about() -> None:
    assert dataset_warnings(_dataset(delta=1e-6, n_rows_dp=1013)) == []
    [warning] = dataset_warnings(_dataset(delta=1e-2, n_rows_dp=500, n_rows=2000))
    assert "1/n_rows_dp" in warning and "500" in warning and "2000" not in warning


def test_a_budget_that_cannot_be_represented_is_refused_before_it_is_written() -> None:
    from app.kit.errors import InvalidParameter

    state = ledger.LedgerState(mu_cap=1.0, dataset_releases=[math.inf])
    with pytest.raises(InvalidParameter) as info:
        ledger.representable_view(3.0, 1e-6, state, field="count_mu")
    assert info.value.field == "count_mu"
    ok = ledger.representable_view(3.0, 1e-6, ledger.LedgerState(mu_cap=1.0))
    assert ok.mu_remaining == 1.0
