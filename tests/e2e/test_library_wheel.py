"""The library installs alone: lib/ built into a wheel and installed into a clean virtual
environment fits `PrivateKMeans`, with none of the service's packages (FastAPI, SQLAlchemy,
Alembic, RQ, Redis, Dask, s3fs) installed and no `app`, `worker` or `migrations` module.

Building the environment takes a minute or two (pip installs numpy, SciPy, scikit-learn and
numba into it), so it runs only with PRIVCLUST_TEST_WHEEL=1: `.ci/run` runs it as a step of its
own, and `make test` stays within its time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.support.repo import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SERVICE_ONLY = ("fastapi", "starlette", "sqlalchemy", "alembic", "rq", "redis", "dask", "s3fs")

# Run inside the clean environment, from a folder that holds nothing of the repository.
FIT = """
import importlib.util, json
import numpy as np
from privclust import PrivateKMeans
from privclust.clustering import plan_run, cluster

rng = np.random.default_rng(3)
X = np.concatenate([rng.normal(m, 0.5, size=(400, 3)) for m in (-3.0, 0.0, 3.0)]).clip(-5, 5)
km = PrivateKMeans(n_clusters=3, epsilon=2.0, delta=1e-6, lower=[-5] * 3, upper=[5] * 3).fit(X)
plan = plan_run(1200, 3, 3, epsilon=2.0, delta=1e-6)
print(json.dumps({
    "centres": np.asarray(km.cluster_centers_).tolist(),
    "labels": len(km.predict(X)),
    "plan_mu": plan.mu,
    "present": [m for m in %r if importlib.util.find_spec(m) is not None],
    "service": [m for m in ("app", "worker", "migrations") if importlib.util.find_spec(m)],
}))
"""


@pytest.mark.skipif(
    os.environ.get("PRIVCLUST_TEST_WHEEL") != "1",
    reason="builds a clean virtual environment: set PRIVCLUST_TEST_WHEEL=1 (.ci/run does)",
)
def test_the_library_wheel_installs_and_fits_without_the_service(tmp_path: Path) -> None:
    # Built from a copy, so that the build leaves nothing in the work tree.
    source = tmp_path / "lib"
    shutil.copytree(ROOT / "lib", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), source],
        check=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("privclust-*.whl")
    env_dir = tmp_path / "clean"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel)], check=True, timeout=900
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    done = subprocess.run(
        [str(python), "-c", FIT % (SERVICE_ONLY,)],
        cwd=outside,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["present"] == [], f"the library pulled in {report['present']}"
    assert report["service"] == [], f"the wheel installed {report['service']}"
    assert report["labels"] == 1200
    centres = report["centres"]
    assert len(centres) == 3 and all(len(c) == 3 for c in centres)
    assert all(-5 <= v <= 5 for c in centres for v in c), centres
    assert report["plan_mu"] > 0
