"""`privclust api` with several processes starts on a busy machine.

uvicorn's supervisor pings each worker process and kills one that does not answer in time; a
worker answers only once it has imported the app. On a busy machine that import took longer
than uvicorn's default 5 s, every replacement was killed in turn, and `serve` gave up with
"the API did not start". Here each worker process is made to start 8 s late (a
`sitecustomize` that sleeps in multiprocessing's children only, standing in for a slow import),
and the API must still answer with no worker killed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support import processes as p

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="starts a server"),
]

# Longer than uvicorn's default worker health check (5 s), shorter than privclust's.
WORKER_START_DELAY = 8

SLOW_CHILDREN = f"""
import sys, time
if "--multiprocessing-fork" in sys.orig_argv:
    time.sleep({WORKER_START_DELAY})
"""


def test_api_workers_that_start_slowly_are_not_killed(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_CHILDREN)
    port = p.free_port()
    env = p.serve_env(tmp_path / "data", port, PRIVCLUST_API_WORKERS="2")
    migrated = p.run_cli("migrate", env)
    assert migrated.returncode == 0, migrated.stderr
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    log = tmp_path / "api.log"
    api = p.start_cli("api", env, log)
    try:
        p.wait_until(
            p.answers(f"http://127.0.0.1:{port}/healthz"),
            proc=api,
            log=p.log_tail(log),
            timeout=60,
            what="the API did not answer",
        )
        p.wait_until(
            lambda: log.read_text(errors="replace").count("Application startup complete") == 2,
            proc=api,
            log=p.log_tail(log),
            timeout=60,
            what="the second API process did not start",
        )
        text = log.read_text(errors="replace")
        # Both processes started once: none was killed as unresponsive and replaced.
        assert text.count("Started server process") == 2, text
        assert "died" not in text, text
    finally:
        p.stop(api, 30)
