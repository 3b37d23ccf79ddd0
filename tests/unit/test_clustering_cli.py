"""Tests of `privclust cluster`: local clustering of CSV and .npy files from the command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from app.commands import cluster as cluster_command
from privclust.privacy.gdp import mu_from_epsilon_delta


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="privclust")
    subparsers = parser.add_subparsers(dest="command", required=True)
    cluster_command.register(subparsers)
    args = parser.parse_args(argv)
    return int(args.func(args))


def _blobs(n: int = 900) -> np.ndarray:
    rng = np.random.default_rng(0)
    centres = np.array([[10.0, 10.0, 0.0], [12.0, 8.0, 1.0], [9.0, 11.5, -1.0]])
    return centres[rng.integers(3, size=n)] + rng.normal(scale=0.1, size=(n, 3))


@pytest.fixture
def csv_file(tmp_path: Path) -> Path:
    path = tmp_path / "points.csv"
    rows = "\n".join(",".join(f"{v:.6f}" for v in row) for row in _blobs())
    path.write_text("height,weight,score\n" + rows + "\n")
    return path


def test_csv_in_csv_out_with_privacy_on_stderr(
    csv_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(
        [
            "cluster",
            str(csv_file),
            "--k",
            "3",
            "--epsilon",
            "2",
            "--radius",
            "4",
            "--center",
            "10.5",
            "10",
            "0",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0] == "height,weight,score"
    centres = np.array([[float(v) for v in line.split(",")] for line in lines[1:]])
    assert centres.shape == (3, 3)
    # The centres are in the file's coordinates, near the three blobs.
    truth = np.array([[10.0, 10.0, 0.0], [12.0, 8.0, 1.0], [9.0, 11.5, -1.0]])
    assert np.linalg.norm(centres[:, None] - truth[None], axis=2).min(axis=0).max() < 0.3
    # Default delta = 1e-6 whatever the file; the mu is the exact conversion.
    assert "delta=1e-06" in err and "epsilon=2.0" in err
    assert f"mu={mu_from_epsilon_delta(2.0, 1e-6)!r}" in err
    # auto at d = 3 runs pe-lloyd: PE-means's T = floor(4 sqrt(3)) = 6, doubled because
    # epsilon = 2 > 1 (its cap), then 4 Lloyd steps each priced as round(0.1 x 12 / (0.9 x 4)) = 1.
    assert err.startswith("pe-lloyd: ")
    assert "sigma=" in err and "releases=16" in err and "iterations=12" in err


def test_npy_in_json_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "points.npy"
    np.save(path, _blobs())
    code = _run(
        ["cluster", str(path), "--k", "2", "--mu", "1.5", "--radius", "20", "--format", "json"]
    )
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    document = json.loads(out)
    assert document["algorithm"] == "pe-lloyd" and document["k"] == 2  # auto at d = 3
    assert document["columns"] == ["c0", "c1", "c2"]
    assert np.array(document["centers"]).shape == (2, 3)
    privacy = document["privacy"]
    assert privacy["mu"] == 1.5 and privacy["epsilon"] is None and privacy["delta"] is None
    # T = 6 vote histograms, then Lloyd steps each priced as max(1, round(0.1 x 6 / (0.9 s)))
    # = 1 release: s = floor(mu N~ / k / 100) = 6 of them for the noisy N~ of 900 rows (800 to
    # 933; the count's noise std here is 1 / 0.15 = 6.7, so another s about once in 10^6).
    assert (privacy["iterations"], privacy["releases"]) == (6, 12)
    assert np.sqrt(privacy["releases"]) / privacy["sigma"] <= 1.5


def test_default_delta_never_depends_on_the_row_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "many.npy"
    np.save(path, np.random.default_rng(1).normal(size=(300_000, 2)))
    assert (
        _run(
            [
                "cluster",
                str(path),
                "--k",
                "2",
                "--epsilon",
                "1",
                "--radius",
                "3",
                "--iterations",
                "1",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    # The row count is private: the default delta is not derived from it (1/N^1.1 was), and the
    # run pays a tenth of its mu for the noisy count it plans with.
    assert "delta=1e-06," in err and "relation=add-remove" in err and "count_mu=" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--k", "0", "--epsilon", "1", "--radius", "1"], "error (k)"),
        (["--k", "2", "--epsilon", "1", "--radius", "-1"], "error (radius)"),
        (["--k", "2", "--epsilon", "1", "--radius", "1", "--center", "0"], "error (center)"),
        (["--k", "2", "--epsilon", "0", "--radius", "1"], "error (epsilon)"),
        (["--k", "2", "--epsilon", "1", "--delta", "2", "--radius", "1"], "error (delta)"),
        (["--k", "2", "--mu", "1", "--delta", "0.1", "--radius", "1"], "--delta goes with"),
    ],
)
def test_invalid_arguments_exit_2_naming_the_field(
    csv_file: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert _run(["cluster", str(csv_file), *extra]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err


def test_non_numeric_csv_column_is_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("a,name\n1,x\n2,y\n")
    assert _run(["cluster", str(path), "--k", "1", "--epsilon", "1", "--radius", "1"]) == 2
    assert "column 'name' is not numeric" in capsys.readouterr().err


def test_budget_is_required(csv_file: Path) -> None:
    with pytest.raises(SystemExit):
        _run(["cluster", str(csv_file), "--k", "2", "--radius", "1"])


def test_summaries_print_private_sizes_and_loss(
    csv_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["cluster", str(csv_file), "--k", "3", "--epsilon", "2", "--radius", "4"]
    code = _run([*argv, "--center", "10.5", "10", "0", "--summaries", "--format", "json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert len(document["sizes"]) == 3 and all(v >= 0 for v in document["sizes"])
    assert document["loss"] >= 0.0 and document["loss_se"] > 0.0
    assert 0 < document["privacy"]["summary_mu"] < document["privacy"]["mu"]


def test_a_list_of_k_runs_a_sweep_and_prints_its_table(
    csv_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["cluster", str(csv_file), "--k", "1,3,2", "--epsilon", "4", "--radius", "4"]
    assert _run([*argv, "--center", "10.5", "10", "0"]) == 0
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert lines[0] == "k,loss,loss_se"
    table = [line.split(",") for line in lines[1:]]
    assert [int(row[0]) for row in table] == [1, 2, 3]
    assert all(float(row[2]) > 0 for row in table)
    suggested = int(err.split("suggested k: ")[1].split()[0])
    assert suggested in (1, 2, 3)
    assert "sweep: privacy spent: mu=" in err


def test_a_bad_k_list_is_refused(csv_file: Path) -> None:
    with pytest.raises(SystemExit):
        _run(["cluster", str(csv_file), "--k", "2,x", "--epsilon", "1", "--radius", "1"])


@pytest.mark.parametrize(
    ("domain", "message"),
    [
        (["--radius", "1e101"], "radius must be between 1e-100 and 1e+100"),
        (["--radius", "1e90", "--center", "1e100,0,0"], "|center_i| + radius"),
        (["--lower", "0,0,-2e100", "--upper", "20,20,1"], "within +-1e+100"),
        (["--lower", "0,0,0"], "--lower and --upper go together"),
    ],
)
def test_a_domain_outside_the_services_limits_is_refused(
    csv_file: Path, capsys: pytest.CaptureFixture[str], domain: list[str], message: str
) -> None:
    assert _run(["cluster", str(csv_file), "--k", "3", "--epsilon", "1", *domain]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_per_column_bounds_columns_and_summaries_with_their_noise(
    csv_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["cluster", str(csv_file), "--k", "3", "--epsilon", "4", "--lower", "[0, 0]",
            "--upper", "20,20", "--columns", "height,weight", "--summaries",
            "--format", "json"]  # fmt: skip
    assert _run(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["columns"] == ["height", "weight"] and len(doc["centers"]) == 3
    assert doc["loss_space"] == "scaled" and doc["sizes_se"] > 0
    assert all(0 <= v <= 20 for centre in doc["centers"] for v in centre)
    assert isinstance(doc["warnings"], list)


def test_k_above_the_noisy_row_count_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "few.csv"
    path.write_text("a,b\n" + "\n".join("1,2" for _ in range(20)) + "\n")
    assert _run(["cluster", str(path), "--k", "50", "--epsilon", "5", "--radius", "10"]) == 2
    assert "noisy row count" in capsys.readouterr().err


def test_a_table_with_units_gaps_and_categories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(2)
    lines = ["who,amount,plan"]
    for i in range(2000):
        segment = i % 2
        amount = "" if rng.random() < 0.05 else f"{[20.0, 80.0][segment] + rng.normal(0, 2):.2f}"
        lines.append(f"u{i // 4},{amount},{['basic', 'premium'][segment]}")
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    terms = ["--privacy-unit", "who", "--max-rows-per-unit", "2", "--missing", "fill"]
    terms += ["--categories", '{"plan": ["basic", "premium"]}', "--lower", "0", "--upper", "100"]
    common = ["cluster", str(path), "--k", "2", "--epsilon", "4", "--format", "json"]
    assert _run([*common, *terms]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["columns"] == ["amount", "plan=basic", "plan=premium"]
    assert len(document["category_shares"]) == 2
    assert set(document["category_shares"][0]["plan"]) == {"basic", "premium"}
    # m is required with a unit.
    assert _run([*common, "--privacy-unit", "who", "--lower", "0", "--upper", "100"]) == 2
    assert "max_rows_per_unit" in capsys.readouterr().err
