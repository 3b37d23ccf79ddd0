"""`privclust serve` on a port something already listens on stops before it creates anything."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT

pytestmark = [pytest.mark.e2e]


def test_serve_refuses_a_taken_port_before_the_banner_and_the_admin_token(tmp_path: Path) -> None:
    with socket.socket() as other:  # stands in for another privclust on that port
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVCLUST_")}
        env.update(PRIVCLUST_DATA_DIR=str(tmp_path / "var"), PRIVCLUST_PORT=str(port))
        result = subprocess.run(
            [sys.executable, "-m", "app.cli", "serve"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert f"PRIVCLUST_PORT={port + 1}" in result.stderr
    assert "privclust is running" not in result.stdout
    assert "admin token" not in result.stdout + result.stderr
    assert not (tmp_path / "var" / "admin-token").exists()
    assert not (tmp_path / "var" / "privclust.db").exists()
