"""Real tables through the API: per-column bounds clustered on each column's own scale, the
accuracy an estimate promises before anything is spent, honest warnings, and one vocabulary for
vectors. Jobs run through the worker's task function in this process, as a worker runs them.

Statistical tests here use data from fixed seeds; the jobs' noise comes from OS entropy (the
service has no seed), so each states its false-failure rate.
"""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from privclust.clustering.outputs.centre_error import Z90, loss_spread
from tests.support.api import auth, upload, uploaded
from tests.support.data import (
    CUSTOMER_COLUMNS,
    CUSTOMER_LOWER,
    CUSTOMER_SEGMENTS,
    CUSTOMER_UPPER,
    csv_bytes,
    customers,
)
from tests.support.fixed_noise import fix_noise

pytestmark = pytest.mark.integration

COLUMNS = CUSTOMER_COLUMNS
LOWER, UPPER, SEGMENTS = CUSTOMER_LOWER, CUSTOMER_UPPER, CUSTOMER_SEGMENTS


def _table(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n customers in 3 segments, each column in its own units, clipped into the bounds."""
    rows, labels = customers(n, seed)
    return np.clip(rows, LOWER, UPPER), labels


def _upload_box(client: TestClient, key: str, rows: np.ndarray, **bounds: str) -> dict:
    fields = {"lower": ",".join(map(str, LOWER)), "upper": ",".join(map(str, UPPER)), **bounds}
    body = csv_bytes(rows, COLUMNS, digits=3)
    return uploaded(client, key, body, name="customers", radius=None, epsilon=4, **fields)


def _run(job_ids: list[str]) -> None:
    from worker.tasks import run_clustering_job

    for job_id in job_ids:
        assert run_clustering_job(job_id) == "succeeded"


@pytest.mark.slow
def test_a_mixed_unit_table_recovers_every_segment_within_two_percent(
    client, keys, monkeypatch
) -> None:
    # 60,000 rows, 4 columns in very different units, 3 segments; auto, k = 3, epsilon 1, with
    # summaries. The estimate promises a centre error of about 0.03% of each range (its
    # centre_std_fraction); 2% is about 70 of those, and in 20 runs per epsilon of this table
    # (bench/RESULTS.md) no run landed in a wrong basin. Twenty runs cannot show how rarely
    # one would, so the bound is checked on one fixed draw of the noise: deterministic.
    fix_noise(monkeypatch, seed=2)
    rows, labels = _table(60_000, 22)
    ds = _upload_box(client, keys["owner"], rows)
    assert ds["domain"]["kind"] == "box" and ds["domain"]["lower"] == list(LOWER)
    body = {"algorithm": "auto", "k": 3, "epsilon": 1, "summaries": True}
    url = f"/v1/datasets/{ds['id']}/jobs"
    est = client.post(url + "/estimate", headers=auth(keys["analyst"]), json=body).json()
    accuracy = est["accuracy"]
    assert accuracy["loss_space"] == "scaled" and accuracy["basis"] == "final-mean-release"
    assert max(accuracy["centre_std_fraction"]) < 0.002
    np.testing.assert_allclose(
        accuracy["centre_std"], np.array(accuracy["centre_std_fraction"]) * (UPPER - LOWER)
    )
    r = client.post(url, headers=auth(keys["analyst"]), json=body)
    assert r.status_code == 202, r.json()
    _run([r.json()["id"]])
    result = client.get(f"/v1/jobs/{r.json()['id']}", headers=auth(keys["analyst"])).json()[
        "result"
    ]
    exact = np.array([rows[labels == j].mean(axis=0) for j in range(3)])
    centres = np.array(result["centers"])
    for segment in exact:
        error = np.abs(centres - segment) / (UPPER - LOWER)
        assert error.max(axis=1).min() <= 0.02, (centres, exact)
    # The stated band holds the error the method leaves: read from the released loss, it is
    # narrower than the estimate's (which assumes clusters filling the declared box).
    band = result["accuracy"]
    assert band["spread_from"] == "loss" and accuracy["spread_from"] == "domain"
    assert max(band["centre_error_fraction"]) < max(accuracy["centre_error_fraction"])
    for segment in exact:
        error = np.abs(centres - segment) / (UPPER - LOWER)
        assert np.all(error[error.max(axis=1).argmin()] <= band["centre_error_fraction"])
    np.testing.assert_allclose(
        band["centre_error"], np.array(band["centre_error_fraction"]) * (UPPER - LOWER)
    )
    # The segments stand apart, so the released centres narrow the spread's share of the band
    # below the whole spread the loss allows (the band a result without its centres states).
    noise = Z90 * np.array(band["centre_std"]) / (UPPER - LOWER)
    whole = np.hypot(noise, loss_spread(result["loss"], result["loss_se"], len(COLUMNS)))
    assert np.all(np.array(band["centre_error_fraction"]) < whole)
    assert result["loss_space"] == "scaled" and result["columns"] == COLUMNS
    assert result["loss_se"] <= result["loss"] / 4
    assert result["sizes_se"] > 0 and result["warnings"] == []


def test_a_target_accuracy_gives_the_smallest_epsilon_that_meets_it(client, keys) -> None:
    rows, _ = _table(4000, 3)
    ds = _upload_box(client, keys["owner"], rows)
    url = f"/v1/datasets/{ds['id']}/jobs/estimate"
    target = {"k": 3, "target_centre_std_fraction": 0.01}
    est = client.post(url, headers=auth(keys["analyst"]), json=target).json()
    assert est["admissible"] is True, est
    epsilon = est["privacy"]["epsilon"]
    assert max(est["accuracy"]["centre_std_fraction"]) <= 0.01
    # The same job asked with that epsilon promises the same; a little less budget misses it.
    again = client.post(url, headers=auth(keys["analyst"]), json={"k": 3, "epsilon": epsilon})
    assert max(again.json()["accuracy"]["centre_std_fraction"]) <= 0.01
    less = client.post(url, headers=auth(keys["analyst"]), json={"k": 3, "epsilon": epsilon * 0.95})
    assert max(less.json()["accuracy"]["centre_std_fraction"]) > 0.01
    # Unreachable, or given with epsilon: 422 naming the field.
    for body in ({"k": 3, "target_centre_std_fraction": 1e-9},
                 {"k": 3, "epsilon": 1, "target_centre_std_fraction": 0.01}):  # fmt: skip
        refused = client.post(url, headers=auth(keys["analyst"]), json=body)
        assert refused.status_code == 422
        assert refused.json()["field"] == "target_centre_std_fraction"


def test_a_noise_dominated_sweep_suggests_no_k_and_says_why(client, keys) -> None:
    # 3,000 rows under bounds 100 times wider than the data: every noisy loss is mostly noise.
    # Whether a sweep can tell its ks apart, and which warnings a job carries, depends on that
    # noise (the service has no seed), so this test checks that the service applies the rules
    # to what it released; tests/unit/test_tables.py checks the rules' outcome on a fixed seed.
    # Measured over 25 such sweeps (100 jobs): no k suggested in 25, and 97 of the 100 losses
    # could not be told from zero.
    from privclust.clustering.outputs.uncertainty import figure_warnings
    from privclust.clustering.sweeps import suggest_k

    rows, _ = _table(3000, 5)
    lower, upper = LOWER - 5000, UPPER + 5000
    wide = {"lower": ",".join(map(str, lower)), "upper": ",".join(map(str, upper))}
    ds = _upload_box(client, keys["owner"], rows, **wide)
    body = {"ks": [2, 3, 4, 5], "epsilon": 1}
    est = client.post(
        f"/v1/datasets/{ds['id']}/sweeps/estimate", headers=auth(keys["analyst"]), json=body
    ).json()
    assert [len(j["accuracy"]["centre_std"]) for j in est["jobs"]] == [4, 4, 4, 4]
    r = client.post(f"/v1/datasets/{ds['id']}/sweeps", headers=auth(keys["analyst"]), json=body)
    assert r.status_code == 202, r.json()
    _run([job["job_id"] for job in r.json()["jobs"]])
    sweep = client.get(f"/v1/sweeps/{r.json()['id']}", headers=auth(keys["analyst"])).json()
    assert sweep["status"] == "succeeded"
    losses = [job["loss"] for job in sweep["jobs"]]
    ses = [job["loss_se"] for job in sweep["jobs"]]
    assert sweep["suggested_k"] == suggest_k(body["ks"], losses, ses)
    if sweep["suggested_k"] is None:
        # Mostly no two losses differ by more than noise explains; by that rule's chance (1 in
        # 20 at most), one rises with k or the elbow moves with the noise.
        codes = [w["code"] for w in sweep["warnings"]]
        assert codes in (["sweep-inconclusive"], ["sweep-loss-rises"], ["sweep-elbow-unclear"])
        if codes == ["sweep-inconclusive"]:
            assert "cannot tell the ks apart" in sweep["warnings"][0]["detail"]
    else:
        assert "suggested-k-budget" in {w["code"] for w in sweep["warnings"]}
    # Each job's warnings are the rules applied to its released figures and the declared box.
    uninformative = 0
    for entry in sweep["jobs"]:
        result = client.get(f"/v1/jobs/{entry['job_id']}", headers=auth(keys["analyst"])).json()
        result = result["result"]
        expected = figure_warnings(
            np.array(result["centers"]), lower, upper, loss=result["loss"],
            loss_se=result["loss_se"], sizes=result["sizes"], sizes_se=result["sizes_se"],
            units=upper - lower,
        )  # fmt: skip
        # `not-converged` reads the run's last Lloyd step, which the result does not show.
        shown = [w for w in result["warnings"] if w["code"] != "not-converged"]
        assert shown == [{"code": w.code, "detail": w.detail} for w in expected]
        uninformative += "loss-not-informative" in {w.code for w in expected}
    # 3 of the 100 measured losses were informative: p <= 0.076 at 95% confidence (Clopper-
    # Pearson), so all four jobs of a sweep informative, the only way this fails, has
    # probability p^4 <= 3.3e-5 (8e-7 at p = 0.03).
    assert uninformative >= 1


def test_a_budget_too_small_to_plan_with_is_a_422_naming_it(client, keys) -> None:
    rows, _ = _table(500, 1)
    ds = _upload_box(client, keys["owner"], rows)
    for path, body in (
        ("sweeps", {"ks": [2, 3], "epsilon": 1e-300, "delta": 1e-300, "algorithm": "fastlloyd"}),
        ("jobs", {"k": 2, "mu": 1e-300, "algorithm": "fastlloyd"}),
        ("jobs/estimate", {"k": 2, "epsilon": 1e-300, "delta": 1e-300}),
    ):
        r = client.post(f"/v1/datasets/{ds['id']}/{path}", headers=auth(keys["analyst"]), json=body)
        assert r.status_code == 422, (path, r.json())
        assert r.json()["field"] in ("epsilon", "mu") and "too small" in r.json()["detail"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"radius": "10", "center": "0,0,0,x"}, "center"),
        ({"radius": "10", "center": "[0, 0"}, "center"),
        ({"lower": "0,0", "upper": "1,,1"}, "upper"),
        ({"radius": "10", "columns": "age,[x]"}, "columns"),
    ],
)
def test_vector_fields_explain_a_refusal_in_words(
    client: TestClient, keys, fields: dict[str, str], field: str
) -> None:
    radius = fields.pop("radius", None)
    r = upload(client, keys["owner"], csv_bytes(_table(50, 0)[0], COLUMNS), radius=radius, **fields)
    assert r["status"] == 422 and r["body"]["field"] == field
    detail = r["body"]["detail"]
    assert "e.g." in detail and "[ \\t" not in detail and "^" not in detail and "(?" not in detail


def test_comma_separated_columns_and_centre_are_read_as_json_arrays_are(client, keys) -> None:
    body = csv_bytes(_table(300, 0)[0], COLUMNS)
    a = uploaded(client, keys["owner"], body, columns="spend, age", center="500,50", radius="600")
    b = uploaded(
        client, keys["owner"], body, columns='["spend", "age"]', center="[500, 50]", radius="600"
    )
    assert a["columns"] == b["columns"] == ["spend", "age"]
    assert a["domain"] == b["domain"] and a["domain"]["kind"] == "ball"


def test_the_upload_form_is_a_named_model_and_its_vectors_state_their_syntax(client) -> None:
    schema = client.get("/openapi.json").json()
    names = schema["components"]["schemas"]
    assert "DatasetUpload" in names and not any(n.startswith("Body_") for n in names)
    props = names["DatasetUpload"]["properties"]
    for field in ("center", "lower", "upper", "columns"):
        assert props[field]["type"] == "string" and props[field]["pattern"].startswith("^")
    estimate = schema["paths"]["/v1/datasets/{dataset_id}/jobs/estimate"]["post"]
    ref = estimate["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    target = names[ref.rsplit("/", 1)[1]]["properties"]["target_centre_std_fraction"]
    number = next(branch for branch in target["anyOf"] if branch["type"] == "number")
    assert (number["exclusiveMinimum"], number["exclusiveMaximum"]) == (0, 1)


def test_a_blank_name_is_refused_in_words(client: TestClient, keys) -> None:
    r = upload(client, keys["owner"], csv_bytes(_table(50, 0)[0], COLUMNS), name="   ")
    assert r["status"] == 422 and r["body"]["field"] == "name"
    assert "pattern" not in r["body"]["detail"] and "\\S" not in r["body"]["detail"]


def test_no_validation_error_shows_an_expression(client: TestClient, keys) -> None:
    # A cursor the API never issued: refused against its pattern, explained in words.
    r = client.get("/v1/datasets", headers=auth(keys["analyst"]), params={"cursor": "%%%"})
    assert r.status_code == 422 and r.json()["field"] == "cursor"
    body = r.text
    assert "pattern '" not in body and "^" not in r.json()["detail"]
