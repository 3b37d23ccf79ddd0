"""What a job's result says beyond its released numbers: the space its loss is measured in, the
noise of its sizes, and warnings where a noisy figure is not informative. All of it is read from
released values and the dataset's public metadata (post-processing: no budget)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.models import Dataset, DomainKind, Job
from privclust.clustering import Algorithm, Relation, RunPlan
from privclust.clustering.data.scaling import ORIGINAL_SPACE, SCALED_SPACE, Box
from privclust.clustering.methods.pe_lloyd import projects
from privclust.clustering.outputs.accuracy import (
    Accuracy,
    Space,
    expected_accuracy,
    plan_from,
    released_accuracy,
)
from privclust.clustering.outputs.uncertainty import Caveat, figure_warnings, sizes_noise_std
from privclust.clustering.run.options import DEFAULT_PROJECTION_DIM
from privclust.tabular import TableSpec, category_shares


@dataclass(frozen=True)
class ResultContext:
    """The public facts about a job's dataset that its result is read with: the column names,
    where losses are measured, the declared range of every column (a box's bounds, or c +- R
    for a ball), the neighbouring relation, and the space and public row count the accuracy
    model reads."""

    columns: list[str]
    loss_space: str
    lower: list[float]
    upper: list[float]
    relation: str
    space: Space | None = None
    n_rows: int = 1
    # The dataset's table terms (privclust.tabular.TableSpec.public(); None: a plain table).
    table_spec: dict[str, Any] | None = None

    @classmethod
    def of(cls, dataset: Dataset) -> ResultContext:
        """A dataset's context (its domain read as app.datasets.domain reads it)."""
        return cls.of_columns(
            dataset.columns,
            dataset.domain_kind,
            dataset.lower,
            dataset.upper,
            dataset.center,
            dataset.radius,
            dataset.count_public,
            dataset.n_rows,
            dataset.n_rows_dp,
            dataset.table_spec,
        )

    @classmethod
    def of_columns(
        cls,
        columns: list[Any],
        kind: str,
        lower: list[Any] | None,
        upper: list[Any] | None,
        center: list[Any],
        radius: float,
        count_public: bool,
        n_rows: int | None = None,
        n_rows_dp: int | None = None,
        table_spec: dict[str, Any] | None = None,
    ) -> ResultContext:
        """From a dataset's columns as one query reads them (app.jobs.repository); the row
        count the dataset's jobs plan with (app.datasets.service.planning_count's rule)."""
        box = kind == DomainKind.BOX and lower is not None and upper is not None
        if box:
            assert lower is not None and upper is not None
            lo, hi = [float(v) for v in lower], [float(v) for v in upper]
            space = Space.box(Box.of(lo, hi))
        else:
            lo = [float(c) - radius for c in center]
            hi = [float(c) + radius for c in center]
            space = Space.ball(radius, len(columns))
        planned = n_rows if count_public else n_rows_dp
        return cls(
            columns=list(columns),
            loss_space=SCALED_SPACE if box else ORIGINAL_SPACE,
            lower=lo,
            upper=hi,
            relation=(Relation.REPLACE_ONE if count_public else Relation.ADD_REMOVE).value,
            space=space,
            n_rows=max(int(planned or 1), 1),
            table_spec=table_spec,
        )


def result_category_shares(
    job: Job, context: ResultContext
) -> list[dict[str, dict[str, float]]] | None:
    """Each centre's share of each category of the dataset's categorical columns
    (app.datasets.table_terms.category_shares: post-processing of the released centres)."""
    if job.centers is None:
        return None
    spec = TableSpec.of(context.table_spec)
    return category_shares([list(c) for c in job.centers], context.columns, spec)


def sizes_se(job: Job, relation: str) -> float | None:
    """The standard deviation of the noise on each released size (None without summaries)."""
    return None if job.sizes is None else sizes_noise_std(job.summary_mu, relation)


def result_warnings(job: Job, context: ResultContext) -> list[Caveat]:
    """The warnings of a succeeded job's released figures
    (privclust.clustering.outputs.uncertainty)."""
    if job.centers is None:
        return []
    return figure_warnings(
        np.asarray(job.centers, dtype=np.float64),
        np.asarray(context.lower, dtype=np.float64),
        np.asarray(context.upper, dtype=np.float64),
        loss=job.loss,
        loss_se=job.loss_se,
        sizes=job.sizes,
        sizes_se=sizes_se(job, context.relation),
        units=None if context.space is None else context.space.units,
        last_move=job.last_move,
        last_shift=job.last_shift,
    )


def job_run_plan(job: Job, context: ResultContext) -> RunPlan:
    """The public plan a job ran, rebuilt from its stored parameters and its dataset's."""
    n_cols = len(context.columns)
    projection_dim = None
    if job.algorithm == Algorithm.PE_LLOYD and projects(n_cols):
        projection_dim = int(job.params.get("projection_dim") or DEFAULT_PROJECTION_DIM)
    return plan_from(
        job,
        n_rows=context.n_rows,
        n_cols=n_cols,
        relation=context.relation,
        projection_dim=projection_dim,
    )


def result_accuracy(job: Job, context: ResultContext) -> Accuracy | None:
    """A succeeded job's accuracy from its released values (its loss, when it has one, and its
    centres' separation) and the public plan
    (privclust.clustering.outputs.accuracy.released_accuracy)."""
    if job.centers is None or context.space is None:
        return None
    planned = expected_accuracy(job_run_plan(job, context), context.space)
    centres = np.asarray(job.centers, dtype=np.float64)
    return released_accuracy(planned, context.space, job.loss, job.loss_se, centres)


# The centres table's own columns; a dataset column of the same name is suffixed `_value`.
CENTRE_TABLE_COLUMNS = ("centre", "size", "size_se")


def centre_table(job: Job, context: ResultContext) -> tuple[list[str], list[dict[str, Any]]]:
    """A succeeded job's centres as a flat table: one row per centre, its index (`centre`),
    each coordinate under its column's name in the column's units, and with summaries its
    noisy `size` and that size's noise `size_se`. Post-processing of the release: free."""
    assert job.centers is not None
    names = [f"{c}_value" if c in CENTRE_TABLE_COLUMNS else str(c) for c in context.columns]
    columns = ["centre", *names]
    se = sizes_se(job, context.relation)
    if job.sizes is not None:
        columns += ["size", "size_se"]
    rows = []
    for index, centre in enumerate(job.centers):
        row: dict[str, Any] = {"centre": index, **dict(zip(names, map(float, centre), strict=True))}
        if job.sizes is not None:
            row.update(size=int(job.sizes[index]), size_se=se)
        rows.append(row)
    return columns, rows
