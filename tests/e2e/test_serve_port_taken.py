"""`privclust serve` on a port something already listens on stops before it creates anything."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.processes import run_cli, serve_env

pytestmark = [pytest.mark.e2e]


def test_serve_refuses_a_taken_port_before_the_banner_and_the_admin_token(tmp_path: Path) -> None:
    with socket.socket() as other:  # stands in for another privclust on that port
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        result = run_cli("serve", serve_env(tmp_path / "var", port))
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert f"PRIVCLUST_PORT={port + 1}" in result.stderr
    assert "privclust is running" not in result.stdout
    assert "admin token" not in result.stdout + result.stderr
    assert not (tmp_path / "var" / "admin-token").exists()
    assert not (tmp_path / "var" / "privclust.db").exists()
