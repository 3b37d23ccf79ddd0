"""The console's files as the API serves them, and GET /v1/me, which the console signs in with.

The browser itself is driven in tests/e2e/test_console.py; these checks need no browser."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.console import STATIC_DIR
from tests.support.api import auth
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration

FILES = sorted(p for p in STATIC_DIR.rglob("*") if p.is_file())
# A URL with a host: "//host", "http://host", "https://host". The SVG namespace is a name that
# is never fetched, so it is the one allowed.
HOST_URL = re.compile(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
NAMESPACES = {"//www.w3.org"}


def test_console_is_served_with_a_same_origin_policy(client: TestClient) -> None:
    r = client.get("/console", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"].endswith("/console/")
    r = client.get("/console/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert "<title>privclust console</title>" in r.text
    csp = r.headers["content-security-policy"]
    for directive in ("default-src 'none'", "script-src 'self'", "connect-src 'self'"):
        assert directive in csp
    assert "unsafe" not in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert client.get("/console/no-such-file.js").status_code == 404


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(STATIC_DIR)))
def test_every_file_is_served_with_its_type(client: TestClient, path: Path) -> None:
    expected = {".html": "text/html", ".css": "text/css", ".js": "text/javascript"}[path.suffix]
    r = client.get(f"/console/{path.relative_to(STATIC_DIR).as_posix()}")
    assert r.status_code == 200
    # Browsers refuse to run a module script served with another type.
    assert r.headers["content-type"].split(";")[0] == expected
    assert r.content == path.read_bytes()


def test_nothing_is_fetched_from_another_host() -> None:
    for path in FILES:
        hosts = set(HOST_URL.findall(path.read_text())) - {f"http:{n}" for n in NAMESPACES}
        assert not hosts, f"{path.name} refers to {hosts}"


def test_local_references_resolve(client: TestClient) -> None:
    html = (STATIC_DIR / "index.html").read_text()
    refs = re.findall(r'(?:src|href)="([^"#:]+)"', html)
    assert "js/main.js" in refs and "console.css" in refs
    for ref in refs:
        if ref.startswith("../"):
            continue  # the API's own pages (/docs)
        assert client.get(f"/console/{ref}").status_code == 200, ref
    assert "<script>" not in html  # the policy allows no inline script
    for path in STATIC_DIR.rglob("*.js"):
        for ref in re.findall(r'from "(\.[^"]+)"', path.read_text()):
            assert (path.parent / ref).resolve().is_file(), f"{path.name} imports {ref}"


def test_package_data_ships_every_console_file() -> None:
    """`pip install .` (and the container image) must carry the console: every file under
    static/ is matched by a package-data pattern."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["app.console"]
    package = STATIC_DIR.parent
    shipped = {p for pattern in patterns for p in package.glob(pattern)}
    assert set(FILES) <= shipped, sorted(str(p) for p in set(FILES) - shipped)


@pytest.mark.parametrize("role", ["owner", "analyst", "admin"])
def test_me_names_the_calling_key(client: TestClient, keys: dict[str, str], role: str) -> None:
    r = client.get("/v1/me", headers=auth(keys[role]))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["role"] == role
    assert body["tenant"] == ("admin" if role == "admin" else "acme")
    assert keys[role].startswith(body["prefix"])
    assert keys[role] not in r.text and "key" not in body


def test_me_needs_a_valid_key(client: TestClient, keys: dict[str, str]) -> None:
    for headers in ({}, auth("pck_nope")):
        r = client.get("/v1/me", headers=headers)
        assert r.status_code == 401
        assert r.headers["content-type"].startswith("application/problem+json")
    analyst = client.get("/v1/me", headers=auth(keys["analyst"])).json()
    revoked = client.delete(f"/v1/api-keys/{analyst['id']}", headers=auth(keys["admin"]))
    assert revoked.status_code == 200
    assert client.get("/v1/me", headers=auth(keys["analyst"])).status_code == 401
