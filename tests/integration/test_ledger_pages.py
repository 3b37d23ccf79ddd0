"""GET /v1/datasets/{id}/ledger a page at a time: every entry once, in either order, and the
budget that comes with each page is the dataset's current one."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.jobs import service as jobs_service
from app.kit.db.session import session_scope
from tests.support.api import auth
from tests.support.db import admit, make_dataset

pytestmark = pytest.mark.integration


def _pages(client: TestClient, key: str, dataset_id: object, **params: object) -> list[dict]:
    pages, cursor = [], None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        r = client.get(f"/v1/datasets/{dataset_id}/ledger", headers=auth(key), params=query)
        assert r.status_code == 200, r.text
        pages.append(r.json())
        cursor = pages[-1]["next_cursor"]
        if cursor is None:
            return pages


def test_the_ledger_pages_through_every_entry_once_either_way(
    client: TestClient, keys, settings
) -> None:
    url = settings.resolved_database_url
    dataset_id = make_dataset(url, mu_cap=10.0, count_mu=0.1, n_rows_dp=1000)
    with session_scope(url) as s:
        for _ in range(6):
            assert admit(s, dataset_id, jobs_service.JobRequest(k=2, mu=0.2)) is not None
    key = keys["analyst"]
    whole = _pages(client, key, dataset_id)  # the default page (100) holds all 8
    assert len(whole) == 1 and whole[0]["next_cursor"] is None
    entries = whole[0]["entries"]
    assert [e["kind"] for e in entries] == ["cap", "count"] + ["reserve"] * 6
    ids = [e["id"] for e in entries]

    forward = _pages(client, key, dataset_id, limit=3)
    assert [len(p["entries"]) for p in forward] == [3, 3, 2]
    assert [e["id"] for p in forward for e in p["entries"]] == ids
    backward = _pages(client, key, dataset_id, limit=3, order="desc")
    assert [e["id"] for p in backward for e in p["entries"]] == ids[::-1]
    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=auth(key)).json()
    assert all(p["budget"] == budget for p in forward + backward)
    assert budget["jobs"] == 6

    # A page boundary stays put while entries are appended: the next page starts after it.
    first = forward[0]
    with session_scope(url) as s:
        assert admit(s, dataset_id, jobs_service.JobRequest(k=2, mu=0.2)) is not None
    rest = _pages(client, key, dataset_id, limit=3, cursor=first["next_cursor"])
    assert [e["id"] for p in rest for e in p["entries"]][:5] == ids[3:]
    assert len([e for p in rest for e in p["entries"]]) == 6


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": 1001}, {"cursor": "abc"}, {"cursor": "1" * 19}, {"order": "up"}],
)
def test_a_bad_page_request_is_a_422(client: TestClient, keys, settings, params: dict) -> None:
    dataset_id = make_dataset(settings.resolved_database_url, mu_cap=1.0)
    r = client.get(f"/v1/datasets/{dataset_id}/ledger", headers=auth(keys["owner"]), params=params)
    assert r.status_code == 422 and r.json()["code"] == "invalid-parameter", r.text
