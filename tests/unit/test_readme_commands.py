"""The README works for a newcomer as written: its links resolve and its commands exist."""

from __future__ import annotations

import re
import shlex
import tomllib

import pytest

from app.cli import build_parser
from tests.support.repo import ROOT, code_blocks, only_code_block, readme

README = readme()


def test_every_relative_link_in_the_readme_and_docs_resolves_inside_the_repository() -> None:
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        assert "shared/" not in text, f"{doc.name} points outside the repository"
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (doc.parent / target).resolve()
            assert path.is_relative_to(ROOT) and path.exists(), f"{doc.name}: {target}"


def test_the_readme_links_the_api_contract() -> None:
    assert "[docs/api.md](docs/api.md)" in README
    assert "/openapi.json" in README


def _privclust_commands() -> list[list[str]]:
    found = []
    for line in README.splitlines():
        line = line.split("#", 1)[0].strip().strip("`")
        if line.startswith(".venv/bin/privclust "):
            found.append(shlex.split(line)[1:])
    return found


def test_the_readme_runs_privclust_from_where_make_installs_it() -> None:
    # `make run` installs the package into .venv; the console script is named `privclust`.
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["privclust"] == "app.cli:main"
    assert "$(BIN)/pip install --quiet -e ." in (ROOT / "Makefile").read_text()
    # No code block tells the reader to run a bare `privclust ...`, which is not on PATH.
    for block in code_blocks(README, "bash"):
        for line in block.splitlines():
            assert not re.match(r"\s*privclust\s", line), line
    assert len(_privclust_commands()) >= 3


@pytest.mark.parametrize("argv", _privclust_commands(), ids=" ".join)
def test_each_privclust_command_in_the_readme_parses(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert callable(args.func)


def test_the_readme_estimator_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    block = only_code_block("As a scikit-learn estimator", "python")
    assert len([line for line in block.splitlines() if line.strip()]) <= 12  # a short example
    exec(compile(block, "README.md", "exec"), {})
    assert "'relation': 'add-remove'" in capsys.readouterr().out
