"""What an analyst receives while a dataset is importing: every refusal they can trigger and
every read they can make, through the real API and database, with the import held at a known
progress and with its exact row count already read (as a worker leaves it mid-import).

What a user checks: no body carries the import's progress, the exact row count or the source's
size in bytes (each a function of the data that was never released).
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from app.kit.config import Settings, get_settings
from app.kit.db.session import session_scope
from app.models import Dataset
from tests.support.api import auth

pytestmark = pytest.mark.integration

N_ROWS = 57
PROGRESS = 0.8765  # shown to an owner as 0.8765; as a percentage it would read 87 or 88


@pytest.fixture
def importing(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """(the app, the importing dataset's id, its source's size in bytes)."""
    lake = tmp_path / "lake"
    lake.mkdir()
    rows = np.random.default_rng(3).normal(0.0, 2.0, (N_ROWS, 2))
    pq.write_table(pa.table({"x": rows[:, 0], "y": rows[:, 1]}), lake / "t.parquet")
    monkeypatch.setenv("PRIVCLUST_IMPORT_SOURCES", str(lake))
    get_settings.cache_clear()
    return lake, (lake / "t.parquet").stat().st_size


def _hold_mid_import(settings: Settings, dataset_id: str) -> None:
    """The dataset as its worker leaves it halfway: progress set and the exact count read."""
    with session_scope(settings.resolved_database_url) as session:
        dataset = session.get(Dataset, uuid.UUID(dataset_id))
        assert dataset is not None and dataset.status == "importing"
        dataset.progress = PROGRESS
        dataset.n_rows = N_ROWS


def _analyst_requests(dataset_id: str) -> list[tuple[str, str, dict | None]]:
    """Every request an analyst can send about the dataset: those refused and the reads."""
    url = f"/v1/datasets/{dataset_id}"
    other = uuid.uuid4()
    job = {"k": 2, "epsilon": 1}
    return [
        ("POST", url + "/jobs", job),
        ("POST", url + "/jobs", {"k": 0, "epsilon": 1}),
        ("POST", url + "/jobs", {"k": 2, "epsilon": 1, "algorithm": "pe-means"}),
        ("POST", url + "/jobs/estimate", job),
        ("POST", url + "/jobs/estimate", {"k": 2, "target_centre_std_fraction": 0.1}),
        ("POST", url + "/sweeps", {"ks": [2, 3], "epsilon": 1}),
        ("POST", url + "/sweeps/estimate", {"ks": [2, 3], "epsilon": 1}),
        ("POST", url + "/sweeps", {"ks": [2, 3], "epsilon": 1, "summaries": True}),
        ("PATCH", url + "/budget", {"epsilon": 5}),
        ("DELETE", url, None),
        ("GET", url, None),
        ("GET", url + "/budget", None),
        ("GET", url + "/ledger", None),
        ("GET", "/v1/datasets", None),
        ("GET", f"/v1/jobs?dataset_id={dataset_id}", None),
        ("GET", f"/v1/sweeps?dataset_id={dataset_id}", None),
        ("GET", f"/v1/jobs/{other}", None),
        ("GET", f"/v1/jobs/{other}/labels", None),
        ("POST", f"/v1/jobs/{other}/cancel", None),
        ("GET", f"/v1/sweeps/{other}", None),
        ("POST", f"/v1/sweeps/{other}/cancel", None),
    ]


# Ids and timestamps hold digits that mean nothing; they are removed before looking for numbers.
_NOISE = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:\d\d)?"
)


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+(?:\.\d+)?", _NOISE.sub(" ", text)))


def test_nothing_an_analyst_receives_during_an_import_derives_from_its_data(
    settings: Settings, importing: tuple, keys: dict
) -> None:
    from app.main import create_app

    lake, size = importing
    with TestClient(create_app(get_settings())) as client:
        form = {"name": "lake", "epsilon": "2", "delta": "1e-6", "radius": "10"}
        form["source"] = str(lake)
        r = client.post(
            "/v1/datasets",
            headers=auth(keys["owner"]),
            files={k: (None, v) for k, v in form.items()},
        )
        assert r.status_code == 202, r.text
        dataset_id = r.json()["id"]
        _hold_mid_import(settings, dataset_id)

        owner_view = client.get(f"/v1/datasets/{dataset_id}", headers=auth(keys["owner"])).json()
        assert owner_view["progress"] == PROGRESS  # the owner still sees it

        forbidden = {str(N_ROWS), str(size), "87", "88", str(PROGRESS), "0.88"}
        statuses = []
        for method, path, body in _analyst_requests(dataset_id):
            resp = client.request(method, path, headers=auth(keys["analyst"]), json=body)
            statuses.append(resp.status_code)
            text = resp.text
            assert "%" not in text, (method, path, text)
            assert not _numbers(text) & forbidden, (method, path, text)
            if resp.status_code == 409:
                assert resp.json()["code"] == "dataset-not-ready", text
        # Refusals of each kind were sent: not ready, invalid, forbidden and not found.
        assert {409, 422, 403, 404} <= set(statuses), statuses
