"""The import allow-list: only sources under the operator's prefixes, in whole path segments,
never the service's own data, never through `..` or a symlink that leads outside."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.datasets.sources import check_source
from app.kit.config import Settings
from app.kit.errors import ImportSourceForbidden, InvalidParameter


def _settings(tmp_path: Path, *prefixes: str, storage: str | None = None) -> Settings:
    return Settings(
        data_dir=tmp_path / "var",
        import_sources=list(prefixes),
        storage_url=storage,
    )


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    folder = tmp_path / "lake"
    (folder / "exports").mkdir(parents=True)
    (folder / "exports" / "a.parquet").write_bytes(b"PAR1")
    return folder


def test_sources_under_a_prefix_are_allowed_normalised(tmp_path: Path, lake: Path) -> None:
    s = _settings(tmp_path, str(lake), "s3://bucket/exports")
    assert check_source(f"{lake}/exports/a.parquet", s).url == str(lake / "exports" / "a.parquet")
    assert check_source(f" {lake}//exports/ ", s).url == str(lake / "exports")
    assert check_source("s3://bucket/exports/2026/", s).url == "s3://bucket/exports/2026"
    assert check_source("s3://bucket/exports", s).remote


@pytest.mark.parametrize(
    "source",
    [
        "s3://bucket/exports-secret/a.parquet",  # a prefix counts whole segments
        "s3://bucket/other",
        "s3://other-bucket/exports",
        "/etc/passwd",
    ],
)
def test_sources_outside_every_prefix_are_forbidden(tmp_path: Path, source: str) -> None:
    with pytest.raises(ImportSourceForbidden) as refused:
        check_source(source, _settings(tmp_path, "s3://bucket/exports", str(tmp_path / "lake")))
    assert refused.value.status == 403 and refused.value.code == "import-source-forbidden"


@pytest.mark.parametrize(
    "source",
    [
        "s3://bucket/exports/../secret",
        "/lake/exports/../../etc/passwd",
        "/lake/./exports",
        "s3://bucket//exports",
        "s3://",
        "lake/exports",  # relative
        "http://example.com/a.parquet",
        "file:///lake/exports",
        "gs://bucket/exports",
        "s3://bucket/exports/\x00",
        "",
    ],
)
def test_malformed_sources_are_refused_naming_the_field(tmp_path: Path, source: str) -> None:
    with pytest.raises(InvalidParameter) as refused:
        check_source(source, _settings(tmp_path, "s3://bucket/exports", "/lake"))
    assert refused.value.field == "source"


def test_a_symlink_that_leads_outside_the_prefixes_is_forbidden(tmp_path: Path, lake: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (lake / "exports" / "shortcut").symlink_to(secret)
    with pytest.raises(ImportSourceForbidden):
        check_source(f"{lake}/exports/shortcut", _settings(tmp_path, str(lake)))


def test_the_services_own_data_is_never_importable(tmp_path: Path) -> None:
    # Even when the operator's prefix covers it, or a source would cover it.
    local = _settings(tmp_path, str(tmp_path))
    for source in (str(tmp_path / "var"), str(tmp_path / "var" / "datasets"), str(tmp_path)):
        with pytest.raises(ImportSourceForbidden):
            check_source(source, local)
    remote = _settings(tmp_path, "s3://bucket", storage="s3://bucket/privclust")
    for source in ("s3://bucket/privclust/abc", "s3://bucket"):
        with pytest.raises(ImportSourceForbidden):
            check_source(source, remote)
    assert check_source("s3://bucket/lake", remote).url == "s3://bucket/lake"


def test_with_no_prefixes_imports_are_off(tmp_path: Path, lake: Path) -> None:
    with pytest.raises(ImportSourceForbidden) as refused:
        check_source(str(lake), _settings(tmp_path))
    assert "off" in refused.value.detail
