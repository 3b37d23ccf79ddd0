"""The repository as the tests read it: its root, and the README's sections and code blocks."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme() -> str:
    return (ROOT / "README.md").read_text()


def readme_section(title: str) -> str:
    """The README's text from the heading `## <title>...` to the next `## ` heading."""
    return readme().split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def code_blocks(text: str, language: str) -> list[str]:
    """The bodies of the fenced ```<language> blocks in `text`."""
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def only_code_block(title: str, language: str) -> str:
    """The one ```<language> block of a README section (there must be exactly one)."""
    blocks = code_blocks(readme_section(title), language)
    assert len(blocks) == 1, (title, blocks)
    return blocks[0]
