"""The console's job page of a federated dataset shows each member's part (public facts only:
its status and the releases it answered), with real API and worker processes in Chromium. The
API is its own federation's three members here: three datasets, three member keys, all reached
at its own URL."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_console import browser  # noqa: F401 (the module's Chromium fixture)
from tests.support.api import uploaded, wait_for_job
from tests.support.browser import new_console, shot
from tests.support.federation import PARTS, csv
from tests.support.patience import Patience
from tests.support.services import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.browser]


def _federated_job(stack: Stack, analyst_key: str, owner_key: str) -> dict[str, Any]:
    """A pe-means job on a federated dataset whose members are three datasets of this API,
    run to its end by the stack's worker."""
    members = []
    with stack.client(owner_key) as owner, stack.client(stack.admin_key) as admin:
        for i, rows in enumerate(PARTS):
            part = uploaded(owner, None, csv(rows), name=f"part {i}", epsilon="10")
            key = admin.post(
                "/v1/api-keys", json={"tenant": "acme", "role": "member", "dataset_id": part["id"]}
            ).json()["key"]
            members.append({"url": stack.base_url, "dataset_id": part["id"], "key": key})
        form = {
            "name": "pooled", "epsilon": "8", "delta": "1e-6", "radius": "10",
            "columns": "x,y", "members": json.dumps(members),
        }  # fmt: skip
        made = owner.post("/v1/datasets", data=form, timeout=120)
        assert made.status_code == 201, made.text + stack.logs()
    with stack.client(analyst_key) as analyst:
        job = analyst.post(
            f"/v1/datasets/{made.json()['id']}/jobs",
            json={"k": 3, "algorithm": "pe-means", "epsilon": 1},
        ).json()
        done = wait_for_job(analyst, job["id"], {"succeeded", "failed"}, 180, stack.logs)
        # The worker tells the members the job's end just after storing its result.
        patience = Patience(30)
        while any(m["status"] != "finished" for m in done["members"]) and patience.left():
            time.sleep(0.2)
            done = analyst.get(f"/v1/jobs/{job['id']}").json()
        return dict(done)


def test_a_federated_jobs_page_shows_each_members_part(
    browser: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    owner_key, analyst_key = stack.new_keys()
    job = _federated_job(stack, analyst_key, owner_key)
    assert job["status"] == "succeeded", job
    releases = job["privacy"]["iterations"]
    assert job["members"] == [
        {"position": i, "status": "finished", "releases": releases} for i in range(3)
    ]
    c = new_console(browser, stack, tmp_path)
    page = c.page
    try:
        page.goto(stack.base_url + "/console/")
        c.sign_in(analyst_key)
        page.goto(f"{stack.base_url}/console/#/jobs/{job['id']}")
        states = page.get_by_role("list", name="Members' status").get_by_role("listitem")
        expect(states).to_have_count(3)
        for i in range(3):
            expect(states.nth(i)).to_have_text(
                f"{stack.base_url}: finished after {releases} releases"
            )
        # Public facts only: no member's row count appears on the page.
        text = page.locator("main").inner_text()
        assert not any(f"{len(rows)} rows" in text for rows in PARTS)
        shot(c, "federated-job")
    finally:
        c.close()
    c.assert_clean()
