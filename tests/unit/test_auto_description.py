"""One description of `auto`: the sentence privclust.clustering.auto.describe_auto renders from
the rule's own constants is the one the README, docs/algorithms.md, the API's schema, the CLI's
help and the estimator's docstring carry, and it says what choose_algorithm does."""

from __future__ import annotations

from privclust import PrivateKMeans
from privclust.clustering import Algorithm, choose_algorithm
from privclust.clustering.auto import AUTO_ALGORITHM, describe_auto

from tests.support.repo import ROOT


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_every_description_of_auto_is_the_rendered_rule() -> None:
    from app.cli import build_parser
    from app.jobs.schemas import JobCreate

    rule = describe_auto()
    for doc in ("README.md", "docs/algorithms.md"):
        assert f"| `auto` | {rule} |" in (ROOT / doc).read_text(), doc
    assert rule in _flat(JobCreate.model_json_schema()["properties"]["algorithm"]["description"])
    assert rule[0].upper() + rule[1:] in _flat(PrivateKMeans.__doc__ or "")
    cluster = build_parser()._subparsers._group_actions[0].choices["cluster"]  # type: ignore[union-attr]
    assert rule in _flat(cluster.format_help())


def test_the_rendered_rule_says_what_choose_algorithm_does() -> None:
    rule = describe_auto()
    assert f"runs {AUTO_ALGORITHM.value} on every table and budget" in rule
    for d in (2, 32, 33, 128):
        for mu in (0.01, 0.4, 10.0):
            assert choose_algorithm(10_000, d, 4, mu) == AUTO_ALGORITHM == Algorithm.PE_LLOYD
