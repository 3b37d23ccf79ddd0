"""Summaries, sweeps and labels through the real API, database and Redis, with jobs run by the
worker's task function in this process (as a worker would run them).

Who sees what: the owner and the analyst see the same noisy sizes and loss (never the exact
ones, which are never stored), only the owner gets labels, another tenant sees nothing.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from fastapi.testclient import TestClient

from privclust.clustering.outputs import summaries as sm
from privclust.clustering.run.options import SUMMARY_MU_FRACTION, SWEEP_SUMMARY_FRACTION
from privclust.clustering.run.schedule import LOSS_GRID_BITS, summary_sigmas
from tests.support.api import auth, uploaded
from tests.support.data import csv_bytes, rows_around

pytestmark = pytest.mark.integration


def _rows(n: int = 600, seed: int = 4) -> np.ndarray:
    centres = np.array([[-3.0, -3.0], [3.0, 3.0], [3.0, -3.0]])
    return rows_around(centres, n, 0.4, np.random.default_rng(seed))


def _upload(client: TestClient, key: str, rows: np.ndarray, epsilon: str = "4") -> dict:
    body = csv_bytes(rows, ["a", "b"])
    return uploaded(client, key, body, name="s", filename="d.csv", epsilon=epsilon, delta="1e-6")


def _run_all(job_ids: list[str]) -> None:
    from worker.tasks import run_clustering_job

    for job_id in job_ids:
        assert run_clustering_job(job_id) == "succeeded"


def _summarised_job(client: TestClient, keys: dict[str, str], rows: np.ndarray) -> tuple:
    ds = _upload(client, keys["owner"], rows)
    body = {"k": 3, "epsilon": 0.5, "algorithm": "pe-means", "summaries": True}
    r = client.post(f"/v1/datasets/{ds['id']}/jobs", headers=auth(keys["analyst"]), json=body)
    assert r.status_code == 202, r.json()
    _run_all([r.json()["id"]])
    return ds, r.json()["id"]


def test_summaries_are_priced_by_the_estimate_and_charged_with_the_job(client, keys) -> None:
    ds = _upload(client, keys["owner"], _rows())
    body = {"k": 3, "epsilon": 0.5, "algorithm": "pe-means"}
    url = f"/v1/datasets/{ds['id']}/jobs"
    plain = client.post(url + "/estimate", headers=auth(keys["analyst"]), json=body).json()
    est = client.post(
        url + "/estimate", headers=auth(keys["analyst"]), json={**body, "summaries": True}
    ).json()
    # Same total cost; the summaries take their share and the centres' noise grows with it.
    assert est["privacy"]["mu"] == plain["privacy"]["mu"]
    assert est["privacy"]["summary_mu"] == pytest.approx(
        SUMMARY_MU_FRACTION * plain["privacy"]["mu"], rel=1e-12
    )
    assert plain["privacy"]["summary_mu"] is None
    assert est["privacy"]["sigma"] > plain["privacy"]["sigma"]

    r = client.post(url, headers=auth(keys["analyst"]), json={**body, "summaries": True})
    assert r.status_code == 202
    _run_all([r.json()["id"]])
    job = client.get(f"/v1/jobs/{r.json()['id']}", headers=auth(keys["analyst"])).json()
    assert job["summaries"] is True and job["privacy"] == est["privacy"]
    result = job["result"]
    assert len(result["sizes"]) == 3 and all(isinstance(v, int) and v >= 0 for v in result["sizes"])
    assert 0.0 <= result["loss"] <= 4 * 10.0**2
    sizes_sigma, loss_sigma = summary_sigmas(job["privacy"]["summary_mu"])
    n_dp = client.get(f"/v1/datasets/{ds['id']}", headers=auth(keys["analyst"])).json()
    # The loss's clip is the released centres' covering bound of the ball (public).
    bound = sm.loss_bound(np.array(result["centers"]), 10.0)
    assert 100.0 <= bound < 4 * 100.0
    assert result["loss_se"] == pytest.approx(bound * loss_sigma / n_dp["n_rows_dp"])
    # The ledger's charge is the job's whole mu and says what it pays for.
    ledger = client.get(f"/v1/datasets/{ds['id']}/ledger", headers=auth(keys["analyst"])).json()
    reserve = next(e for e in ledger["entries"] if e["kind"] == "reserve")
    assert reserve["mu"] == job["privacy"]["mu"] and "summaries" in reserve["note"]
    # The calibration: centres' releases + the two summary releases compose to the job's mu.
    composed = math.sqrt(
        job["privacy"]["iterations"] / job["privacy"]["sigma"] ** 2
        + 1 / sizes_sigma**2
        + 1 / loss_sigma**2
    )
    assert composed <= job["privacy"]["mu"] * (1 + 1e-12)
    assert composed == pytest.approx(job["privacy"]["mu"], rel=1e-9)


def test_no_role_sees_exact_sizes_or_losses_and_only_the_owner_gets_labels(client, keys) -> None:
    rows = _rows()
    ds, job_id = _summarised_job(client, keys, rows)
    owner_view = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["owner"])).json()
    analyst_view = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    # The owner sees the same noisy releases, nothing more (and the run's times exact, which
    # analysts see to the minute).
    times = {"started_at": None, "finished_at": None}
    assert {**owner_view, **times} == {**analyst_view, **times}
    centres = np.array(owner_view["result"]["centers"])
    exact = sm.exact_summary(rows, centres, radius=10.0, center=np.zeros(2))
    exact_loss = exact.loss_units * exact.bound / 2**LOSS_GRID_BITS / len(rows)
    # With the job's noise (sizes sd ~90 rows, loss sd ~ 2^20 x 45 grid units) the chance
    # that all three noisy sizes hit the exact ones is ~1e-7; the loss, far smaller.
    assert owner_view["result"]["sizes"] != exact.counts.tolist()
    assert owner_view["result"]["loss"] != pytest.approx(exact_loss, rel=1e-9)
    # Nothing any role can read carries the exact values or labels.
    reads = {
        "owner": [f"/v1/jobs/{job_id}", "/v1/jobs", f"/v1/datasets/{ds['id']}/ledger"],
        "analyst": [f"/v1/jobs/{job_id}", "/v1/jobs", f"/v1/datasets/{ds['id']}/ledger"],
    }
    for role, urls in reads.items():
        for url in urls:
            text = client.get(url, headers=auth(keys[role])).text
            assert str(exact.counts.tolist()) not in text and repr(exact_loss) not in text
    # Labels: the owner's only; the analyst and another tenant get the 404 of an unknown job.
    for role in ("analyst", "other_owner"):
        r = client.get(f"/v1/jobs/{job_id}/labels", headers=auth(keys[role]))
        assert r.status_code == 404 and r.json()["code"] == "job-not-found", role
    r = client.get(f"/v1/jobs/{job_id}/labels", headers=auth(keys["admin"]))
    assert r.status_code == 403
    r = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["other_owner"]))
    assert r.status_code == 404


def test_the_owner_streams_labels_as_csv_or_npy(client, keys) -> None:
    rows = _rows()
    ds, job_id = _summarised_job(client, keys, rows)
    centres = np.array(
        client.get(f"/v1/jobs/{job_id}", headers=auth(keys["owner"])).json()["result"]["centers"]
    )
    expected = ((rows[:, None, :] - centres[None]) ** 2).sum(axis=2).argmin(axis=1)

    r = client.get(f"/v1/jobs/{job_id}/labels", headers=auth(keys["owner"]))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    lines = r.text.splitlines()
    assert lines[0] == "label" and [int(v) for v in lines[1:]] == expected.tolist()

    for how in ({"params": {"format": "npy"}}, {"headers": {"Accept": "application/x-npy"}}):
        headers = {**auth(keys["owner"]), **how.get("headers", {})}
        r = client.get(f"/v1/jobs/{job_id}/labels", headers=headers, params=how.get("params"))
        assert r.status_code == 200 and r.headers["content-type"] == "application/x-npy"
        labels = np.load(io.BytesIO(r.content), allow_pickle=False)
        assert labels.dtype == np.int32 and labels.tolist() == expected.tolist()

    # Deleted rows: 410, never labels.
    assert client.delete(f"/v1/datasets/{ds['id']}", headers=auth(keys["owner"])).status_code in (
        200,
        204,
    )
    r = client.get(f"/v1/jobs/{job_id}/labels", headers=auth(keys["owner"]))
    assert r.status_code == 410 and r.json()["code"] == "rows-deleted"


def test_labels_of_an_unfinished_job_are_409(client, keys) -> None:
    ds = _upload(client, keys["owner"], _rows(100))
    r = client.post(
        f"/v1/datasets/{ds['id']}/jobs", headers=auth(keys["owner"]), json={"k": 2, "epsilon": 0.5}
    )
    r = client.get(f"/v1/jobs/{r.json()['id']}/labels", headers=auth(keys["owner"]))
    assert r.status_code == 409 and r.json()["code"] == "job-not-succeeded"


def test_a_sweep_runs_one_summarised_job_per_k_and_suggests_one(client, keys) -> None:
    ds = _upload(client, keys["owner"], _rows(3000), epsilon="40")
    body = {"ks": [4, 1, 2], "epsilon": 30.0, "algorithm": "pe-means"}
    headers = {**auth(keys["analyst"]), "Idempotency-Key": "sweep-1"}
    # The estimate prices exactly what the sweep will charge, and charges nothing.
    ledger_url = f"/v1/datasets/{ds['id']}/ledger"
    before = client.get(ledger_url, headers=auth(keys["analyst"])).json()
    est = client.post(
        f"/v1/datasets/{ds['id']}/sweeps/estimate", headers=auth(keys["analyst"]), json=body
    )
    assert est.status_code == 200, est.json()
    est = est.json()
    assert est["admissible"] is True and [j["k"] for j in est["jobs"]] == [1, 2, 4]
    assert client.get(ledger_url, headers=auth(keys["analyst"])).json() == before
    assert est["budget"]["mu_spent"] == pytest.approx(before["budget"]["mu_spent"])
    # Admission reserves each job's mu: three jobs of job_mu, the sweep's mu in all.
    assert est["budget_after"]["mu_reserved"] ** 2 == pytest.approx(
        before["budget"]["mu_reserved"] ** 2 + est["privacy"]["mu"] ** 2, rel=1e-9
    )
    assert est["budget_after"]["jobs"] == before["budget"]["jobs"] + 3
    r = client.post(f"/v1/datasets/{ds['id']}/sweeps", headers=headers, json=body)
    assert r.status_code == 202, r.json()
    sweep = r.json()
    assert sweep["privacy"] == est["privacy"]
    assert sweep["ks"] == [1, 2, 4] and sweep["status"] == "queued"
    assert sweep["suggested_k"] is None
    assert sweep["privacy"]["job_mu"] == pytest.approx(sweep["privacy"]["mu"] / math.sqrt(3))
    # Idempotent: the same key and body replay the sweep, a different body is refused.
    again = client.post(f"/v1/datasets/{ds['id']}/sweeps", headers=headers, json=body)
    assert again.status_code == 202 and again.json()["id"] == sweep["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    other = client.post(
        f"/v1/datasets/{ds['id']}/sweeps", headers=headers, json={**body, "ks": [1, 2]}
    )
    assert other.status_code == 409 and other.json()["code"] == "idempotency-key-reused"

    _run_all([p["job_id"] for p in sweep["jobs"]])
    done = client.get(f"/v1/sweeps/{sweep['id']}", headers=auth(keys["analyst"])).json()
    assert done["status"] == "succeeded"
    assert done["progress"]["iteration"] == done["progress"]["iterations"] > 0
    losses = [p["loss"] for p in done["jobs"]]
    assert all(p["loss_se"] > 0 for p in done["jobs"])
    # Three blobs 6 apart: the exact losses are about 19, 8 and 0.5 and the loss's noise has
    # sd ~0.2 here (20 offline runs of this sweep: every gap above 30 SE, suggested k = 4 in
    # all), so the order and the suggestion fail with negligible probability.
    assert losses[0] > losses[1] > losses[2]
    assert done["suggested_k"] == 4
    # Every job forced summaries and was charged job_mu; the ledger ties them to the sweep.
    for point in done["jobs"]:
        job = client.get(f"/v1/jobs/{point['job_id']}", headers=auth(keys["analyst"])).json()
        assert job["summaries"] and job["sweep_id"] == sweep["id"]
        assert job["privacy"]["mu"] == sweep["privacy"]["job_mu"]
        planned = next(j for j in est["jobs"] if j["k"] == point["k"])
        assert job["privacy"] == planned["privacy"] and job["algorithm"] == planned["algorithm"]
        # A sweep's jobs give their summaries the sweeps' larger share.
        assert job["privacy"]["summary_mu"] == pytest.approx(
            SWEEP_SUMMARY_FRACTION * job["privacy"]["mu"], rel=1e-12
        )
    ledger = client.get(f"/v1/datasets/{ds['id']}/ledger", headers=auth(keys["analyst"])).json()
    reserves = [e for e in ledger["entries"] if e["kind"] == "reserve"]
    assert len(reserves) == 3 and {e["sweep_id"] for e in reserves} == {sweep["id"]}
    assert ledger["budget"]["mu_spent"] ** 2 == pytest.approx(
        sweep["privacy"]["job_mu"] ** 2 * 3 + ds["count_mu"] ** 2, rel=1e-9
    )
    # Another tenant cannot see it.
    r = client.get(f"/v1/sweeps/{sweep['id']}", headers=auth(keys["other_owner"]))
    assert r.status_code == 404


def test_a_sweep_that_does_not_fit_charges_nothing(client, keys) -> None:
    ds = _upload(client, keys["owner"], _rows(300), epsilon="1")
    before = client.get(f"/v1/datasets/{ds['id']}/ledger", headers=auth(keys["owner"])).json()
    # Each job alone would fit (epsilon 0.9 < 1 at the dataset's delta), all three do not.
    body = {"ks": [2, 3, 4], "mu": before["budget"]["mu_remaining"] * 1.01}
    est = client.post(
        f"/v1/datasets/{ds['id']}/sweeps/estimate", headers=auth(keys["analyst"]), json=body
    ).json()
    assert est["admissible"] is False and est["budget_after"] == est["budget"]
    r = client.post(f"/v1/datasets/{ds['id']}/sweeps", headers=auth(keys["analyst"]), json=body)
    assert r.status_code == 409 and r.json()["code"] == "budget-exceeded"
    assert r.json()["mu_requested"] == pytest.approx(body["mu"])
    after = client.get(f"/v1/datasets/{ds['id']}/ledger", headers=auth(keys["owner"])).json()
    assert after == before
    jobs = client.get("/v1/jobs", headers=auth(keys["owner"]), params={"dataset_id": ds["id"]})
    assert jobs.json()["items"] == []


def test_a_cancelled_sweep_refunds_its_queued_jobs(client, keys) -> None:
    ds = _upload(client, keys["owner"], _rows(300))
    r = client.post(
        f"/v1/datasets/{ds['id']}/sweeps",
        headers=auth(keys["analyst"]),
        json={"ks": [2, 3], "epsilon": 1.0},
    )
    sweep = r.json()
    r = client.post(f"/v1/sweeps/{sweep['id']}/cancel", headers=auth(keys["analyst"]))
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert {p["status"] for p in r.json()["jobs"]} == {"cancelled"}
    budget = client.get(f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"])).json()
    assert budget["mu_reserved"] == 0.0 and budget["mu_spent"] == pytest.approx(ds["count_mu"])
    r = client.post(f"/v1/sweeps/{sweep['id']}/cancel", headers=auth(keys["analyst"]))
    assert r.status_code == 409 and r.json()["code"] == "sweep-finished"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ks": [2], "epsilon": 1.0}, "ks"),
        ({"ks": [2, 2], "epsilon": 1.0}, "ks"),
        ({"ks": [2, 5000], "epsilon": 1.0}, "ks"),
        ({"ks": [2, 3]}, "epsilon"),
        ({"ks": [2, 3], "epsilon": 1.0, "mu": 1.0}, "epsilon"),
    ],
)
def test_bad_sweeps_are_422_and_charge_nothing(client, keys, body, field) -> None:
    ds = _upload(client, keys["owner"], _rows(300))
    r = client.post(f"/v1/datasets/{ds['id']}/sweeps", headers=auth(keys["analyst"]), json=body)
    assert r.status_code == 422 and r.json()["field"] == field, r.json()
    budget = client.get(f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"])).json()
    assert budget["jobs"] == 0


def test_sweeps_are_listed_newest_first_per_tenant_and_dataset(client, keys) -> None:
    first = _upload(client, keys["owner"], _rows(300))
    second = _upload(client, keys["owner"], _rows(300, seed=5))
    made = []
    for ds, ks in ((first, [2, 3]), (second, [2, 4]), (first, [3, 4])):
        r = client.post(
            f"/v1/datasets/{ds['id']}/sweeps",
            headers=auth(keys["analyst"]),
            json={"ks": ks, "epsilon": 0.5},
        )
        assert r.status_code == 202, r.json()
        made.append(r.json())
    page = client.get("/v1/sweeps", headers=auth(keys["analyst"])).json()
    assert [s["id"] for s in page["items"]] == [s["id"] for s in reversed(made)]
    assert (
        page["items"][0]
        == client.get(f"/v1/sweeps/{made[2]['id']}", headers=auth(keys["analyst"])).json()
    )
    assert [len(s["jobs"]) for s in page["items"]] == [2, 2, 2]
    only_first = client.get(
        "/v1/sweeps", params={"dataset_id": first["id"]}, headers=auth(keys["owner"])
    ).json()
    assert [s["id"] for s in only_first["items"]] == [made[2]["id"], made[0]["id"]]
    # Pages of one follow the cursor to the end.
    seen, cursor = [], None
    while True:
        params = {"limit": 1, **({"cursor": cursor} if cursor else {})}
        r = client.get("/v1/sweeps", params=params, headers=auth(keys["analyst"])).json()
        seen += [s["id"] for s in r["items"]]
        cursor = r["next_cursor"]
        if cursor is None:
            break
    assert seen == [s["id"] for s in reversed(made)]
    # Another tenant sees none of them.
    other = client.get("/v1/sweeps", headers=auth(keys["other_owner"])).json()
    assert other["items"] == []
