"""docs/dashboards.md against a real API and worker: its pandas snippet and its Observable data
loader run verbatim with an analyst key, and every URL of its Grafana dashboard answers a table
with the columns its panels select."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from tests.support.api import uploaded, wait_for_job
from tests.support.data import csv_bytes, two_blobs
from tests.support.repo import ROOT, code_blocks
from tests.support.services import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

DOC = ROOT / "docs" / "dashboards.md"
DASHBOARD = ROOT / "docs" / "grafana" / "privclust-dashboard.json"


def _section(title: str) -> str:
    return DOC.read_text().split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _succeeded_job(stack: Stack, owner_key: str, analyst_key: str) -> tuple[str, dict]:
    with stack.client(owner_key) as owner, stack.client(analyst_key) as analyst:
        ds = uploaded(owner, None, csv_bytes(two_blobs(300)), epsilon=8)
        body = {"k": 2, "epsilon": 2.0, "summaries": True}
        job = analyst.post(f"/v1/datasets/{ds['id']}/jobs", json=body).json()
        done = wait_for_job(analyst, job["id"], {"succeeded", "failed"}, 120, stack.logs)
        assert done["status"] == "succeeded", done
        return ds["id"], done


def test_the_dashboard_snippets_and_panels_read_the_tables(stack: Stack) -> None:
    """One stack for all of it: a stack takes seconds to start."""
    owner_key, analyst_key = stack.new_keys()
    dataset, job = _succeeded_job(stack, owner_key, analyst_key)
    env = {
        **os.environ,
        "PRIVCLUST": stack.base_url,
        "PRIVCLUST_KEY": analyst_key,
        "DATASET": dataset,
        "JOB": job["id"],
    }

    (snippet,) = code_blocks(_section("pandas"), "python")
    ran = subprocess.run(
        [sys.executable, "-c", snippet], env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert "mu_remaining" in ran.stdout and "size_se" in ran.stdout, ran.stdout

    (loader,) = code_blocks(_section("Observable"), "bash")
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", loader], env=env, capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    centres = pd.read_csv(io.StringIO(ran.stdout))
    assert centres[job["result"]["columns"]].to_numpy().tolist() == job["result"]["centers"]
    _every_grafana_panel_reads_a_table_with_its_columns(stack, analyst_key, dataset, job)


def _urls(node: object) -> list[tuple[str, list[str]]]:
    """Every (url, selected columns) of the dashboard's Infinity queries."""
    found = []
    if isinstance(node, dict):
        if "url" in node and "columns" in node:
            found.append((node["url"], [c["selector"] for c in node["columns"]]))
        for value in node.values():
            found += _urls(value)
    elif isinstance(node, list):
        for value in node:
            found += _urls(value)
    return found


def _every_grafana_panel_reads_a_table_with_its_columns(
    stack: Stack, analyst_key: str, dataset: str, job: dict
) -> None:
    board = json.loads(DASHBOARD.read_text())
    assert [p["title"] for p in board["panels"]] == [
        "Budget left",
        "Spending over time (mu of each admitted job)",
        "The last job's centres",
    ]
    values = {"base": stack.base_url, "dataset": dataset, "job": job["id"], "ds": ""}
    queries = _urls(board)
    assert len(queries) == 4  # the three panels and the `job` variable
    with stack.client(analyst_key) as analyst:
        for url, columns in queries:
            real = re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], url)
            answer = analyst.get(real)
            assert answer.status_code == 200, (url, answer.text)
            if "format=csv" in real:
                frame = pd.read_csv(io.StringIO(answer.text))
                assert set(columns) <= set(frame.columns), (url, frame.columns)
            else:
                data = answer.json()
                rows = data.get("items", [data])
                assert rows and all(set(columns) <= set(row) for row in rows), (url, data)
    # The `job` variable's query finds the job the centres panel shows.
    with stack.client(analyst_key) as analyst:
        newest = analyst.get(
            "/v1/jobs", params={"dataset_id": dataset, "status": "succeeded", "limit": 1}
        ).json()["items"]
    assert [j["id"] for j in newest] == [job["id"]]
