"""`privclust api` gives its uvicorn processes a fresh multiprocess-metrics directory."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from app.commands import server


def test_a_fresh_directory_and_the_ones_of_killed_processes_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # Set (empty, which counts as unset) so that monkeypatch restores the original afterwards.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    left = tmp_path / f"privclust-metrics-{dead}-abc123"
    left.mkdir()
    (left / "counter_1.db").write_bytes(b"x")
    running = tmp_path / f"privclust-metrics-{os.getpid()}-def456"  # this process lives
    running.mkdir()

    made = server._metrics_dir()

    assert made is not None and os.environ["PROMETHEUS_MULTIPROC_DIR"] == made
    assert Path(made).is_dir() and Path(made).parent == tmp_path
    assert not left.exists() and running.exists()


def test_an_operators_directory_is_left_to_the_operator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert server._metrics_dir() is None
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path)


def test_the_environment_of_later_tests_is_untouched() -> None:
    # Runs after the tests above (file order): none left multiprocess mode switched on.
    assert not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
