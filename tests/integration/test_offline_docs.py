"""/docs and /redoc work on a host without internet access: every asset comes from the service."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest
from fastapi.testclient import TestClient

from app.kit.config import Settings

pytestmark = [pytest.mark.integration]

BASE = "http://testserver"


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(settings), base_url=BASE) as c:
        yield c


class _References(HTMLParser):
    """Every URL a browser would fetch or follow from the page: src, href, and URLs in scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_script = tag == "script"
        for name, value in attrs:
            if name in ("src", "href", "action", "poster", "data") and value:
                self.urls.append(value)

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        # Inline script: the Swagger UI configuration (openapi url, oauth2 redirect, validator).
        if self._in_script:
            self.urls += re.findall(r"""(?:https?:)?//[^\s'"`)]+""", data)


def _references(html: str) -> list[str]:
    parser = _References()
    parser.feed(html)
    return parser.urls


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_reference_no_external_host(client: TestClient, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    urls = _references(response.text)
    # The page loads its script, and for Swagger UI its stylesheet; both pages have a favicon.
    assert any(u.endswith(".js") for u in urls), urls
    assert any("icon" in tag for tag in re.findall(r"<link[^>]*>", response.text)), response.text
    for url in urls:
        absolute = urljoin(BASE + page, url)
        assert urlsplit(absolute).netloc == "testserver", f"{page} references {url}"
        if url.startswith(("/", ".")) and not url.startswith("//"):
            asset = client.get(absolute)
            assert asset.status_code == 200, f"{page}: {url} answers {asset.status_code}"
    # Swagger UI's default online validator would fetch from a public host: it is switched off.
    if page == "/docs":
        assert '"validatorUrl": null' in response.text


def test_swagger_stylesheet_loads_nothing_from_elsewhere(client: TestClient) -> None:
    page = client.get("/docs").text
    (css,) = [u for u in _references(page) if u.endswith(".css")]
    text = client.get(css).text
    for ref in re.findall(r"url\(\s*['\"]?([^'\")]+)", text):
        assert ref.startswith("data:") or not urlsplit(ref).netloc, ref
    assert "@import" not in text
