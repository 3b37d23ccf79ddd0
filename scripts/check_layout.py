"""The code's size and layering habits, checked (run by `make lint`).

import-linter checks which module may import which (pyproject.toml); this checks what an import
graph cannot see:
- no product module over 400 lines, at most 3 functions over 60 lines and none over 100
  (migrations/versions, tests and bench are not product code);
- no module that defines routes commits or rolls back a session: services own the transaction;
- every algorithm name is written as a string constant at most twice (its enum, and at most one
  other place): everything else derives from the enum.
Prints what it finds and exits 1 when a rule is broken.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOTS = ("app", "lib/privclust", "worker", "migrations")
MAX_MODULE_LINES = 400
LONG_FUNCTION = 60
MAX_LONG_FUNCTIONS = 3
MAX_FUNCTION = 100
ALGORITHM_NAMES = ("auto", "pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd")
MAX_NAME_CONSTANTS = 2


def product_modules(top: Path) -> list[Path]:
    return [
        path
        for root in ROOTS
        for path in sorted((top / root).rglob("*.py"))
        if "versions" not in path.relative_to(top).parts
    ]


def function_lengths(tree: ast.Module) -> list[tuple[int, int, str]]:
    """(lines, first line, name) of every function, decorators included."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            found.append(((node.end_lineno or node.lineno) - first + 1, first, node.name))
    return found


def defines_routes(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.Call) and getattr(node.func, "id", None) == "APIRouter"
        for node in ast.walk(tree)
    )


def transaction_calls(tree: ast.Module) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("commit", "rollback")
    ]


def check(top: Path) -> list[str]:
    problems: list[str] = []
    long_functions: list[str] = []
    constants: dict[str, list[str]] = {name: [] for name in ALGORITHM_NAMES}
    for path in product_modules(top):
        where = path.relative_to(top)
        source = path.read_text()
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            problems.append(f"{where}: {lines} lines (at most {MAX_MODULE_LINES})")
        tree = ast.parse(source)
        for length, line, name in function_lengths(tree):
            if length > MAX_FUNCTION:
                problems.append(f"{where}:{line} {name}: {length} lines (at most {MAX_FUNCTION})")
            elif length > LONG_FUNCTION:
                long_functions.append(f"{where}:{line} {name}: {length} lines")
        if defines_routes(tree):
            problems += [
                f"{where}:{line}: a module that defines routes commits or rolls back"
                for line in transaction_calls(tree)
            ]
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in constants:
                constants[node.value].append(f"{where}:{node.lineno}")
    if len(long_functions) > MAX_LONG_FUNCTIONS:
        problems.append(
            f"{len(long_functions)} functions over {LONG_FUNCTION} lines (at most "
            f"{MAX_LONG_FUNCTIONS}): " + "; ".join(long_functions)
        )
    for name, places in constants.items():
        if len(places) > MAX_NAME_CONSTANTS:
            problems.append(
                f'"{name}" is written {len(places)} times (at most {MAX_NAME_CONSTANTS}): '
                + ", ".join(places)
            )
    return problems


def main() -> int:
    problems = check(Path(__file__).resolve().parent.parent)
    for problem in problems:
        print(problem)
    print(f"layout: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
