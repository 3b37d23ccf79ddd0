"""Real tables through the API: a privacy unit with its m, missing values by a declared policy,
categorical columns; hostile table terms refused with a 422 naming the field, nothing created
or charged; tables made only of gaps and undeclared values release nothing without noise.

Jobs are run by the worker's task function in this process, as a worker would run them.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.support.api import auth, upload, uploaded
from tests.support.db import stored_files
from tests.support.fixed_noise import fix_noise
from tests.support.tables import LOWER, PLANS, UPPER, transactions

pytestmark = pytest.mark.integration

BOX = {"lower": json.dumps(LOWER), "upper": json.dumps(UPPER)}
TERMS = {
    "privacy_unit": "customer",
    "max_rows_per_unit": "8",
    "missing": "drop-row",
    "categories": json.dumps({"plan": PLANS}),
}


def _run(job_id: str) -> None:
    from worker.tasks import run_clustering_job

    assert run_clustering_job(job_id) == "succeeded"


def _job(client: TestClient, key: str, dataset_id: str, body: dict) -> dict:
    r = client.post(f"/v1/datasets/{dataset_id}/jobs", headers=auth(key), json=body)
    assert r.status_code == 202, r.text
    _run(r.json()["id"])
    return client.get(f"/v1/jobs/{r.json()['id']}", headers=auth(key)).json()


def test_a_transactions_table_clusters_its_customers_and_their_plans(
    client, keys, monkeypatch
) -> None:
    # 6,000 customers of 1 to 40 rows (~123,000 rows), 5% empty cells, kept to 8 rows each.
    # Measured on this table (bench/RESULTS.md, "category weight", 10 runs at epsilon 1): the
    # largest centre error 0.7% of a range (mean 0.4%), the largest share error 0.046 (mean
    # 0.025). Ten runs cannot show how rarely a run lands in a wrong basin, so the bounds (3%
    # and 0.15) are checked on one fixed draw of the noise and of the units' rows: the test
    # is deterministic.
    fix_noise(monkeypatch, seed=1)
    table = transactions(6000, seed=1)
    ds = uploaded(client, keys["owner"], table.csv, filename="t.csv", radius=None, **BOX, **TERMS)
    assert ds["privacy_unit"] == "customer" and ds["max_rows_per_unit"] == 8
    assert ds["columns"] == ["amount", "visits", "plan=basic", "plan=premium", "plan=family"]
    counts = ds["table_counts"]
    assert counts["rows_read"] == table.n_rows
    assert 0 < counts["rows_dropped_missing"] < table.n_rows * 0.2
    assert counts["rows_dropped_unit_bound"] > 0
    analyst = client.get(f"/v1/datasets/{ds['id']}", headers=auth(keys["analyst"])).json()
    assert analyst["table_counts"] is None and analyst["n_rows"] is None

    job = _job(client, keys["analyst"], ds["id"], {"k": 3, "epsilon": 1.0})
    assert job["privacy"]["mu"] > 0
    centres = np.array(job["result"]["centers"])[:, :2]
    shares = job["result"]["category_shares"]
    width = np.array(UPPER) - np.array(LOWER)
    for truth, plan_shares in zip(table.centres, table.plan_shares, strict=True):
        nearest = int(np.argmin(np.linalg.norm((centres - truth) / width, axis=1)))
        assert np.all(np.abs(centres[nearest] - truth) <= 0.03 * width), (centres, truth)
        released = [shares[nearest]["plan"][p] for p in PLANS]
        assert np.all(np.abs(np.array(released) - plan_shares) <= 0.15), (released, plan_shares)


def test_a_unit_is_charged_m_times_a_row_by_the_estimate(client, keys) -> None:
    rows = b"id,x\n" + b"".join(f"u{i},{i % 10}\n".encode() for i in range(400))
    by_row = uploaded(client, keys["owner"], rows, radius="10", columns="x")
    by_unit = uploaded(
        client, keys["owner"], rows, radius="10", privacy_unit="id", max_rows_per_unit="5"
    )
    assert by_row["privacy_unit"] == "row" and by_row["max_rows_per_unit"] is None
    # Every row its own unit: nothing is refused, everything is released, at the unit's cost.
    assert by_unit["n_cols"] == 1 and by_unit["table_counts"]["rows_dropped_unit_bound"] == 0
    body = {"k": 2, "epsilon": 1.0, "algorithm": "pe-means"}
    estimates = [
        client.post(
            f"/v1/datasets/{d['id']}/jobs/estimate", headers=auth(keys["analyst"]), json=body
        ).json()
        for d in (by_row, by_unit)
    ]
    assert estimates[0]["protects"].startswith("one row, not one person")
    assert estimates[1]["protects"].startswith("all the rows of one 'id' (at most 5")
    plans = [e["privacy"] for e in estimates]
    assert plans[0]["mu"] == plans[1]["mu"]
    assert plans[1]["sigma"] == pytest.approx(5 * plans[0]["sigma"], rel=1e-6)


@pytest.mark.parametrize(
    ("rows", "fields", "field"),
    [
        (b"id,x\na,1\n", {"privacy_unit": "nobody", "max_rows_per_unit": "2"}, "privacy_unit"),
        (b"id,x\na,1\n", {"privacy_unit": "id", "max_rows_per_unit": "0"}, "max_rows_per_unit"),
        (b"id,x\na,1\n", {"privacy_unit": "id"}, "max_rows_per_unit"),
        (b"x,plan\n1,gold\n", {"categories": '{"plan": ["basic"]}', **BOX}, "categories"),
        (b"x\n1\n\n", {"missing": "fill", "fill": '{"x": 99}'}, "fill"),
        (b"x,y\n1,\n2,\n", {"missing": "drop-row"}, "missing"),
        (b"x\n1\n", {"missing": "sometimes"}, "missing"),
        (b"x\n1\n", {"categories": "[1]"}, "categories"),
    ],
)
def test_hostile_table_terms_are_refused_naming_the_field(
    settings, client, keys, rows, fields, field
) -> None:
    form = dict(fields)
    if "lower" in form and "x,plan" in rows.decode():
        form.update(lower="[0]", upper="[10]")
    radius = None if "lower" in form else "10"
    up = upload(client, keys["owner"], rows, radius=radius, **form)
    assert up["status"] == 422, up
    assert up["body"]["field"] == field, up["body"]
    listed = client.get("/v1/datasets", headers=auth(keys["owner"])).json()
    assert listed["items"] == []
    assert stored_files(settings) == []


def test_tables_of_gaps_and_undeclared_values_release_nothing_without_noise(client, keys) -> None:
    # Every cell missing, or a category nobody declared: every row is the fill (the domain's
    # centre), so an unnoised release would give exactly (5, 5, 1/2, 1/2) in every centre.
    rows = b"x,y,plan\n" + b",,gold\nNA,null,\nNaN,,silver\n" * 200
    terms = {
        "missing": "fill",
        "categories": json.dumps({"plan": ["a", "b"]}),
        "lower": "[0, 0]",
        "upper": "[10, 10]",
    }
    ds = uploaded(client, keys["owner"], rows, radius=None, epsilon=40, **terms)
    assert ds["table_counts"]["rows_filled"] == 600
    for algorithm in ["pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd", "auto"]:
        body = {"k": 2, "epsilon": 1.0, "algorithm": algorithm, "summaries": True}
        job = _job(client, keys["analyst"], ds["id"], body)
        centres = np.array(job["result"]["centers"])
        assert np.all(np.isfinite(centres))
        assert not np.any(np.all(centres == [5.0, 5.0, 0.5, 0.5], axis=1)), algorithm
        assert job["result"]["loss"] is not None and np.isfinite(job["result"]["loss"])


def test_a_npy_with_nan_is_filled_by_the_declared_policy(client, keys) -> None:
    array = np.array([[1.0, np.nan], [np.nan, 2.0], [3.0, 4.0]] * 20)
    buffer = io.BytesIO()
    np.save(buffer, array)
    ds = uploaded(
        client,
        keys["owner"],
        buffer.getvalue(),
        filename="a.npy",
        radius="10",
        missing="fill",
        fill='{"x0": 1.5}',
    )
    assert ds["n_cols"] == 2 and ds["missing"] == "fill" and ds["fill"] == {"x0": 1.5}
    assert ds["table_counts"]["rows_filled"] == 40


@pytest.fixture
def lake_settings(settings, tmp_path, monkeypatch):
    """The tests' settings, with imports allowed from a local `lake` folder."""
    from app.kit.config import get_settings

    monkeypatch.setenv("PRIVCLUST_IMPORT_SOURCES", str(tmp_path / "lake"))
    get_settings.cache_clear()
    return get_settings()


def test_an_import_takes_the_same_table_terms(lake_settings, keys, tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from app.main import create_app
    from worker.imports import run_import

    lake = tmp_path / "lake"
    lake.mkdir()
    units = [f"u{i // 5}" for i in range(300)]  # 60 units of 5 rows, kept to 2 each
    plan = [["basic", "premium", None][i % 3] for i in range(300)]
    amount = [float(i % 7) if i % 11 else None for i in range(300)]
    table = pa.table({"who": units, "amount": amount, "plan": plan})
    pq.write_table(table, lake / "part-0.parquet")
    form = {
        "name": "lake",
        "epsilon": "2",
        "delta": "1e-6",
        "source": str(lake),
        "lower": "[0]",
        "upper": "[10]",
        "privacy_unit": "who",
        "max_rows_per_unit": "2",
        "missing": "fill",
        "categories": json.dumps({"plan": ["basic", "premium"]}),
    }
    with TestClient(create_app(lake_settings)) as client:
        r = client.post(
            "/v1/datasets",
            headers=auth(keys["owner"]),
            files={k: (None, v) for k, v in form.items()},
        )
        assert r.status_code == 202, r.text
        assert run_import(r.json()["id"]) == "ready"
        ds = client.get(f"/v1/datasets/{r.json()['id']}", headers=auth(keys["owner"])).json()
    assert ds["columns"] == ["amount", "plan=basic", "plan=premium"]
    assert (ds["n_rows"], ds["privacy_unit"], ds["max_rows_per_unit"]) == (120, "who", 2)
    assert ds["domain"]["lower"] == [0.0, 0.0, 0.0] and ds["domain"]["upper"] == [10.0, 5.0, 5.0]
    assert ds["table_counts"]["rows_dropped_unit_bound"] == 180
    assert ds["table_counts"]["rows_filled"] > 0


def test_a_parquet_upload_with_nulls_and_an_undeclared_category(client, keys) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "x": [1.0, None, 3.0, 4.0, float("nan"), 6.0] * 10,
            "plan": ["a", "b", "gold", None, "a", "b"] * 10,
        }
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    terms = {"categories": '{"plan": ["a", "b"]}', "lower": "[0]", "upper": "[10]"}
    dropped = uploaded(
        client,
        keys["owner"],
        buffer.getvalue(),
        filename="t.parquet",
        radius=None,
        missing="drop-row",
        **terms,
    )
    # Rows 2 (null), 3 (gold), 4 (null plan) and 5 (NaN) of every six are dropped.
    assert dropped["table_counts"]["rows_dropped_missing"] == 40
    assert dropped["columns"] == ["x", "plan=a", "plan=b"]
    refused = upload(
        client, keys["owner"], buffer.getvalue(), filename="t.parquet", radius=None, **terms
    )
    assert refused["status"] == 422
    assert (refused["body"]["field"], refused["body"]["row"]) == ("missing", 2)


@pytest.mark.parametrize(
    "rows",
    [
        b"x,plan\nabc,a\n",
        b"x,plan\n1,a\n2\n",
        b"x,plan\n1,a,3\n",
        b'x,plan\n"1,a\n',
        b"x,plan\n1,\xff\n",
    ],
)
def test_a_malformed_table_with_terms_is_a_problem_not_a_crash(settings, client, keys, rows):
    up = upload(
        client,
        keys["owner"],
        rows,
        radius=None,
        lower="[0]",
        upper="[10]",
        categories='{"plan": ["a"]}',
        missing="drop-row",
    )
    assert up["status"] == 400, up
    assert up["body"]["code"] in ("non-numeric-value", "invalid-file")
    assert client.get("/v1/datasets", headers=auth(keys["owner"])).json()["items"] == []
    assert stored_files(settings) == []
