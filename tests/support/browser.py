"""The console's browser tests' helpers: Chromium through Playwright (or a skip, or a failure
under PRIVCLUST_REQUIRE_BROWSER=1), a signed-in page that records console errors and requests to
other hosts, screenshots under the test's tmp dir, and checks of what a chart looks like."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.services import Stack

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# The browser logs every non-2xx answer; the tests provoke 401s (a wrong key), 400s (a bad
# file) and 422s (a refused form) on purpose.
EXPECTED_ERRORS = re.compile(r"the server responded with a status of (401|400|422)")


def _unavailable(reason: str) -> None:
    if os.environ.get("PRIVCLUST_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (PRIVCLUST_REQUIRE_BROWSER=1)")
    pytest.skip(f"browser tests skipped: {reason}")


def chromium_path() -> str | None:
    explicit = os.environ.get("PRIVCLUST_CHROMIUM")
    if explicit:
        return shutil.which(explicit)
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


@contextlib.contextmanager
def launched() -> Iterator[Any]:
    """A headless Chromium, or the test skips (fails when a browser is required)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the Python package playwright is not installed (pip install -e '.[dev]')")
    path = chromium_path()
    if path is None and os.environ.get("PRIVCLUST_CHROMIUM"):
        _unavailable(f"PRIVCLUST_CHROMIUM={os.environ['PRIVCLUST_CHROMIUM']} is not an executable")
    if path is None:
        _unavailable(
            "no Chromium found (looked for " + ", ".join(BROWSERS) + "); run "
            "scripts/install-browser.sh (or `make browser`), or set PRIVCLUST_CHROMIUM"
        )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Console:
    """A browser context on the console, and what went wrong in it."""

    context: Any
    page: Any
    shots: Path
    errors: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)

    def sign_in(self, key: str) -> None:
        self.page.get_by_label("API key").fill(key)
        self.page.get_by_role("button", name="Sign in").click()

    def fills_its_card(self, chart: Any) -> None:
        """The chart is as wide as the card (or box) it sits in, less the card's padding."""
        chart_width, holder_width = chart.evaluate(
            "c => [c.getBoundingClientRect().width, c.parentElement.clientWidth]"
        )
        assert chart_width >= 0.97 * holder_width, (chart_width, holder_width)
        card = chart.evaluate("c => (c.closest('.card') || c.parentElement).clientWidth")
        assert holder_width >= 0.9 * card, (holder_width, card)

    def close(self) -> None:
        self.context.close()

    def assert_clean(self) -> None:
        assert self.errors == [], self.errors
        assert self.external == [], self.external


def new_console(
    browser: Any,
    stack: Stack,
    tmp_path: Path,
    *,
    width: int = 1200,
    height: int = 860,
    timezone: str | None = None,
) -> Console:
    from playwright.sync_api import expect

    context = browser.new_context(
        viewport={"width": width, "height": height}, timezone_id=timezone, locale="en-US"
    )
    page = context.new_page()
    # Generous: five seconds is not much for an upload on a loaded two-core machine.
    page.set_default_timeout(20_000)
    expect.set_options(timeout=20_000)
    shots = tmp_path / "screens"
    shots.mkdir(exist_ok=True)
    c = Console(context, page, shots)
    page.on("pageerror", lambda exc: c.errors.append(str(exc)))
    page.on(
        "console",
        lambda m: (
            c.errors.append(m.text)
            if m.type == "error" and not EXPECTED_ERRORS.search(m.text)
            else None
        ),
    )
    page.on(
        "request",
        lambda r: None if r.url.startswith((stack.base_url, "data:")) else c.external.append(r.url),
    )
    return c


def shot(c: Console, name: str, part: Any = None) -> Path:
    """Save the page (and `part`, when given, on its own) under the test's `screens/` dir.
    PRIVCLUST_CONSOLE_SCREENSHOTS=<dir> also writes `console-<name>.png` there (the README's
    pictures are some of these, reduced to 128 colours)."""
    path = c.shots / f"{name}.png"
    if part is not None:
        part.screenshot(path=str(c.shots / f"{name}-part.png"))
    c.page.screenshot(path=str(path), full_page=True)
    out = os.environ.get("PRIVCLUST_CONSOLE_SCREENSHOTS")
    if out:
        (part or c.page).screenshot(path=str(Path(out) / f"console-{name}.png"))
    return path


def round_steps(chart: Any) -> list[float]:
    """The chart's vertical axis labels, checked to be evenly spaced at a round step (1, 2 or 5
    times a power of ten) and written without spurious digits; returned as numbers."""
    labels = chart.evaluate(
        """c => [...c.querySelectorAll('text.tick[text-anchor="end"]')].map(t => t.textContent)"""
    )
    values = [float(label.replace("\u2009", "").replace("\u2212", "-")) for label in labels]
    assert len(values) >= 3, labels
    steps = {round(b - a, 12) for a, b in itertools.pairwise(values)}
    assert len(steps) == 1, labels
    step = steps.pop()
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mantissa, m) for m in (1, 2, 5)), (step, labels)
    assert all(math.isclose(v / step, round(v / step), abs_tol=1e-9) for v in values), labels
    assert all(len(label.replace("-", "")) <= 9 for label in labels), labels
    return values
