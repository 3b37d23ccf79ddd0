"""A federation of four real processes: three members and a coordinator, each `privclust serve`
on its own port and data directory as the README starts them, driven by the README's
"Federated datasets" block verbatim: fastlloyd, pe-means and auto succeed."""

from __future__ import annotations

import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.processes import free_port, logged, serve_env, start_cli, stop, wait_until
from tests.support.repo import only_code_block

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="starts four servers")
def test_the_readme_federation_runs_on_four_processes(tmp_path: Path) -> None:
    names = ["var-m1", "var-m2", "var-m3", "var-c"]
    ports = [free_port() for _ in names]
    logs = [tmp_path / f"{name}.log" for name in names]
    with ExitStack() as stack:
        for name, port, log in zip(names, ports, logs, strict=True):
            env = serve_env(tmp_path / name, port, PRIVCLUST_WORKER_THREADS="1")
            proc = start_cli("serve", env, log)
            stack.callback(stop, proc, 30)
            wait_until(logged(log, "Press Ctrl-C to stop"), proc=proc, log=log.read_text)
        members = " ".join(
            f"http://127.0.0.1:{port}={tmp_path / name}"
            for name, port in zip(names[:3], ports[:3], strict=True)
        )
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", only_code_block("Federated datasets", "bash")],
            env={
                **serve_env(tmp_path / "unused", 0),
                "MEMBERS": members,
                "COORDINATOR": f"http://127.0.0.1:{ports[3]}",
                "COORDINATOR_DIR": str(tmp_path / names[3]),
            },
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        out = "\n".join(log.read_text()[-3000:] for log in logs)
        assert result.returncode == 0, result.stdout + result.stderr + out
    for algorithm in ("fastlloyd", "pe-means", "auto"):
        assert f"{algorithm}: succeeded" in result.stdout, result.stdout
    assert result.stdout.count("fingerprint") == 3 and "federated n_rows_dp =" in result.stdout
