"""The API document as generators read it, and the pages its problem `type` links open.

- One `Algorithm` enum, referenced by every `algorithm` field (a generated client has one type).
- No request body states a `default` (openapi-typescript, with its default options, makes such a
  field required), and no field with one is required; the upload's file part is bytes.
- Every problem code the code base can send (found by reading the sources, so a new code
  without a page fails here) has a page at its `type` URI, in HTML and JSON.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from html import escape as html_escape
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.kit.problem_types import PROBLEM_TYPES
from app.kit.problems import _STATUS_CODES
from tests.support.api import auth
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}/{i}")


def _request_components(spec: dict[str, Any]) -> set[str]:
    schemas = spec["components"]["schemas"]
    found: set[str] = set()
    todo = [
        operation["requestBody"]
        for operations in spec["paths"].values()
        for operation in operations.values()
        if "requestBody" in operation
    ]
    while todo:
        for _, node in _walk(todo.pop()):
            name = node.get("$ref", "").rpartition("/")[2]
            if name and name not in found:
                found.add(name)
                todo.append(schemas[name])
    return found


def test_the_algorithm_enum_is_one_component(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    enums = [path for path, node in _walk(spec) if "pe-lloyd" in node.get("enum", [])]
    assert enums == ["/components/schemas/Algorithm"]
    refs = [path for path, node in _walk(spec) if node.get("$ref", "").endswith("/Algorithm")]
    assert len(refs) >= 7  # jobs, estimates and sweeps, requested and run


def test_request_bodies_state_defaults_in_words_and_take_bytes(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    names = _request_components(spec)
    assert {"JobCreate", "SweepCreate", "DatasetUpload", "JobEstimateRequest"} <= names
    for name in names:
        for field, prop in schemas[name].get("properties", {}).items():
            assert "default" not in prop, (name, field)
    job = schemas["JobCreate"]
    assert "algorithm" not in job["required"] and "summaries" not in job["required"]
    assert 'Default: "auto".' in job["properties"]["algorithm"]["description"]
    file = schemas["DatasetUpload"]["properties"]["file"]
    assert {"type": "string", "format": "binary"}.items() <= file["anyOf"][0].items()
    assert "type" not in file["anyOf"][1]  # bytes, not a JSON string
    # Responses keep their defaults (there they are always present).
    assert schemas["JobOut"]["properties"]["summaries"]["default"] is False


def _code_values(node: ast.AST) -> list[ast.expr]:
    """The expressions `node` gives as a problem code, if any."""
    if isinstance(node, ast.keyword) and node.arg == "code":
        return [node.value]
    if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "code":
        return [node.value] if node.value is not None else []
    if isinstance(node, ast.arguments):
        positional = [*node.posonlyargs, *node.args]
        pairs = [
            *zip(positional[len(positional) - len(node.defaults) :], node.defaults, strict=True)
        ]
        pairs += [
            (a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d is not None
        ]
        return [d for a, d in pairs if a.arg == "code"]
    if isinstance(node, ast.Call):
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        if name in ("problem_response", "_unavailable"):
            return node.args[1:2]
    return []


def _codes_in_sources() -> set[str]:
    """Every string given as a problem code in app/, worker/ and the library (whose table
    checks' codes reach uploads): a `code=` argument or class keyword, a parameter or attribute
    named `code`, the code of problem_response and of the unavailable handlers, and the codes
    of plain HTTP errors."""
    codes = set(_STATUS_CODES.values()) | {"error"}
    for root in ("app", "worker", "lib/privclust"):
        for path in Path(ROOT, root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                codes |= {
                    value.value
                    for value in _code_values(node)
                    if isinstance(value, ast.Constant) and isinstance(value.value, str)
                }
    return codes


def test_every_code_the_api_can_send_has_a_page(client: TestClient) -> None:
    codes = _codes_in_sources()
    assert {"budget-exceeded", "job-not-found", "missing-value", "too-large", "not-ready"} <= codes
    assert sorted(codes - PROBLEM_TYPES.keys()) == []
    for code in sorted(codes):
        html = client.get(f"/problems/{code}")
        assert html.status_code == 200, code
        assert html.headers["content-type"].startswith("text/html")
        assert html_escape(PROBLEM_TYPES[code].title) in html.text
        data = client.get(f"/problems/{code}", headers={"Accept": "application/json"}).json()
        assert data["code"] == code and data["description"] == PROBLEM_TYPES[code].description
    listed = client.get("/problems", headers={"Accept": "application/json"}).json()
    assert {entry["code"] for entry in listed} == set(PROBLEM_TYPES)
    unknown = client.get("/problems/no-such-code")
    assert unknown.status_code == 404 and unknown.json()["code"] == "not-found"


def test_a_problem_documents_type_opens_its_page(client: TestClient, keys) -> None:
    missing = client.get(
        "/v1/jobs/00000000-0000-0000-0000-000000000000", headers=auth(keys["owner"])
    )
    assert missing.status_code == 404
    problem = missing.json()
    assert problem["type"] == "/problems/" + problem["code"]
    page = client.get(problem["type"], headers={"Accept": "application/json"})
    assert page.status_code == 200 and page.json()["code"] == problem["code"]


def test_a_file_part_without_a_filename_is_the_files_content(client: TestClient, keys) -> None:
    """The schema's bytes branch takes any content: a text part is read as a CSV (what a
    client that sends the file as a plain field means), and one that is no table is a 400."""
    form = {"name": "t", "epsilon": "3", "delta": "1e-6", "radius": "10"}
    rows = "a,b\n" + "".join(f"{i % 7},{i % 5}\n" for i in range(300))
    made = client.post(
        "/v1/datasets", headers=auth(keys["owner"]), data={**form, "file": rows}, files={}
    )
    assert made.status_code == 201, made.json()
    assert made.json()["n_cols"] == 2 and made.json()["columns"] == ["a", "b"]
    bad = client.post(
        "/v1/datasets", headers=auth(keys["owner"]), data={**form, "file": "null"}, files={}
    )
    assert bad.status_code == 400, bad.json()
