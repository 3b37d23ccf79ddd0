"""A federation across four test hosts (network namespaces on this machine, root only): three
members and a coordinator, each `privclust serve` on its own host and address. Each member's
owner uploads its part and its admin makes a member key; the coordinator's owner creates the
federated dataset with `members` at the members' addresses, so every call of a federated job
crosses the bridge between hosts. fastlloyd, pe-means and auto succeed, every member charges
them on its own ledger, and the coordinator's host stores no row.

Only with PRIVCLUST_TEST_HOSTS=1 and as root (`.ci/run` runs it beside tests/e2e/test_hosts.py);
elsewhere it skips, saying why.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.support.api import bearer_client, new_keys, wait_for_job
from tests.support.federation import PARTS, make_members, members_field
from tests.support.hosts import HostProcesses, hosts_or_skip, network_of_hosts, processes_on
from tests.support.processes import answers, serve_env, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MEMBERS = ("m1", "m2", "m3")
PORT = 8000
RUNS = (("fastlloyd", "fastlloyd"), ("pe-means", "pe-means"), ("auto", "pe-lloyd"))  # asked, ran


@dataclass
class Federation:
    """The four servers: each host's URL and admin token, and the processes behind them."""

    urls: dict[str, str]
    admins: dict[str, str]
    data_dirs: dict[str, Path]
    procs: HostProcesses


@pytest.fixture
def federation(tmp_path: Path) -> Iterator[Federation]:
    hosts_or_skip()
    names = [*MEMBERS, "coord"]
    with network_of_hosts(names) as network, processes_on(network, tmp_path) as procs:
        urls, admins, data_dirs = {}, {}, {}
        for name in names:
            host = network.hosts[name]
            admins[name] = f"pck_hosts_federation_{name}_admin"
            data_dirs[name] = tmp_path / name
            env = serve_env(
                data_dirs[name],
                PORT,
                PRIVCLUST_HOST=host.address,
                PRIVCLUST_ADMIN_TOKEN=admins[name],
                PRIVCLUST_WORKER_THREADS="1",
                PYTHONUNBUFFERED="1",
            )
            procs.start(name, name, [sys.executable, "-m", "app.cli", "serve"], env)
            urls[name] = f"http://{host.address}:{PORT}"
        for name in names:  # started together, waited for one by one
            wait_until(
                answers(urls[name] + "/readyz", timeout=2),
                proc=procs.processes[name],
                what=f"{name} did not start",
                log=procs.all_logs,
                timeout=120,
            )
        yield Federation(urls, admins, data_dirs, procs)


def _member(federation: Federation, name: str, rows: np.ndarray) -> dict:
    """On the member's own server: its owner's upload of `rows` and a member key for it."""
    url = federation.urls[name]
    with bearer_client(url, federation.admins[name]) as admin:
        owner, _ = new_keys(admin)  # the tenant make_members gives its member keys
    with bearer_client(url, owner) as client:
        keys = {"admin": federation.admins[name], "owner": owner}
        (made,) = make_members(client, keys, [rows])
    return {**made, "url": url, "owner": owner}


def test_a_federation_of_three_member_hosts_runs_its_jobs_across_the_network(
    federation: Federation,
) -> None:
    members = [_member(federation, name, part) for name, part in zip(MEMBERS, PARTS, strict=True)]
    coordinator = federation.urls["coord"]
    with bearer_client(coordinator, federation.admins["coord"]) as admin:
        owner_key, analyst_key = new_keys(admin, tenant="consortium")
    form = {
        "name": "pooled", "epsilon": "8", "delta": "1e-6", "radius": "10", "columns": "x,y",
        "members": json.dumps(members_field(members)),
    }  # fmt: skip
    with bearer_client(coordinator, owner_key) as owner:
        made = owner.post("/v1/datasets", data=form)
        assert made.status_code == 201, made.text + federation.procs.all_logs()
    dataset = made.json()
    assert [m["fingerprint"] for m in dataset["members"]] == [m["fingerprint"] for m in members]
    with bearer_client(coordinator, analyst_key) as analyst:
        for algorithm, ran in RUNS:
            r = analyst.post(
                f"/v1/datasets/{dataset['id']}/jobs",
                json={"k": 3, "algorithm": algorithm, "epsilon": 1},
            )
            assert r.status_code == 202, r.text
            job = wait_for_job(
                analyst, r.json()["id"], {"succeeded", "failed"}, 180, federation.procs.all_logs
            )
            assert job["status"] == "succeeded", (job, federation.procs.all_logs())
            assert job["algorithm"] == ran and len(job["result"]["centers"]) == 3
        spent = analyst.get(f"/v1/datasets/{dataset['id']}").json()["budget"]["mu_spent"]
    for m in members:  # each member charged the count and the three jobs on its own ledger
        with bearer_client(m["url"], m["owner"]) as member_owner:
            seen = member_owner.get(f"/v1/datasets/{m['dataset']['id']}").json()
        assert seen["budget"]["mu_spent"] >= spent - 1e-6, seen
    # The coordinator holds no row (a member does: the check can tell).
    for name, holds_rows in (("coord", False), ("m1", True)):
        stored = [p for p in federation.data_dirs[name].rglob("*") if p.suffix == ".npy"]
        assert bool(stored) == holds_rows, (name, stored)
