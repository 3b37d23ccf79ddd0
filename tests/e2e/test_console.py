"""The web console in a real browser: Playwright drives Chromium against real API and worker
processes. Without a Chromium (scripts/install-browser.sh installs Debian's) the test skips,
unless PRIVCLUST_REQUIRE_BROWSER=1 (CI sets it once it has installed one): then it fails."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.data import csv_bytes
from tests.support.services import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.browser]

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
K = 3


def _unavailable(reason: str) -> None:
    if os.environ.get("PRIVCLUST_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (PRIVCLUST_REQUIRE_BROWSER=1)")
    pytest.skip(f"browser tests skipped: {reason}")


def chromium_path() -> str | None:
    explicit = os.environ.get("PRIVCLUST_CHROMIUM")
    if explicit:
        return shutil.which(explicit)
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
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
        b = p.chromium.launch(executable_path=path, headless=True)
        try:
            yield b
        finally:
            b.close()


def _blobs_csv(path: Path, n: int = 600, d: int = 3) -> None:
    rng = np.random.default_rng(11)
    centers = rng.uniform(-6, 6, (K, d))
    x = centers[np.arange(n) % K] + rng.normal(0, 0.5, (n, d))
    path.write_bytes(csv_bytes(x, ["height", "weight", "age"][:d], digits=5))


def _sign_in(page: Any, key: str) -> None:
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()


def _shot(page: Any, tmp_path: Path, name: str, part: Any = None) -> None:
    page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
    # Set to a directory to refresh the README's pictures (docs/console*.png are these,
    # reduced to 128 colours).
    out = os.environ.get("PRIVCLUST_CONSOLE_SCREENSHOTS")
    if out:
        (part or page).screenshot(path=str(Path(out) / f"console-{name}.png"))


def test_console_upload_job_centres_and_roles(browser: Any, stack: Stack, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    owner_key, analyst_key = stack.new_keys()
    csv = tmp_path / "blobs.csv"
    _blobs_csv(csv)
    context = browser.new_context(viewport={"width": 1200, "height": 860})
    page = context.new_page()
    # Generous: five seconds is not much for an upload on a loaded two-core machine.
    page.set_default_timeout(20_000)
    expect.set_options(timeout=20_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # The browser logs every non-2xx answer; those to the wrong key and the bad file below are
    # expected.
    expected = re.compile(r"the server responded with a status of (401|400)")
    page.on(
        "console",
        lambda m: (
            errors.append(m.text) if m.type == "error" and not expected.search(m.text) else None
        ),
    )
    external: list[str] = []
    page.on(
        "request",
        lambda r: None if r.url.startswith((stack.base_url, "data:")) else external.append(r.url),
    )
    try:
        # A key that is not one: the problem's detail is shown, and nothing else.
        page.goto(stack.base_url + "/console/")
        _sign_in(page, "pk_not-a-real-key")
        expect(page.get_by_role("alert")).to_contain_text("That key was not accepted")
        expect(page.get_by_role("navigation", name="Main")).to_be_hidden()

        # The owner signs in: an empty state, then uploads through the form.
        _sign_in(page, owner_key)
        expect(page.get_by_role("heading", name="Datasets")).to_be_visible()
        expect(page.get_by_text("No datasets yet.")).to_be_visible()
        assert page.evaluate("sessionStorage.getItem('privclust.apiKey')") == owner_key
        assert page.evaluate("localStorage.length") == 0
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Upload").click()
        # A file the API refuses: its problem (detail and code) is shown, the form stays.
        bad = tmp_path / "bad.csv"
        bad.write_text("height,weight,age\n1,2,3\n4,five,6\n")
        page.get_by_label("Data file").set_input_files(str(bad))
        page.get_by_label("Name", exact=True).fill("blobs")
        page.get_by_label("Epsilon").fill("4")
        page.get_by_label("Radius").fill("12")
        page.get_by_role("button", name="Upload").click()
        alert = page.get_by_role("alert")
        expect(alert).to_contain_text("The upload was refused")
        expect(alert).to_contain_text("non-numeric-value")
        expect(alert).to_contain_text("five")
        page.get_by_label("Data file").set_input_files(str(csv))
        page.get_by_role("button", name="Upload").click()

        # Its page: budget gauges in epsilon and mu, the ledger as a timeline, a priced job.
        expect(page.get_by_role("heading", name="blobs")).to_be_visible()
        expect(page.get_by_role("meter", name="Epsilon remaining")).to_be_visible()
        expect(page.get_by_role("meter", name="Mu remaining")).to_be_visible()
        ledger = page.get_by_role("list", name="Ledger entries, oldest first")
        expect(ledger.get_by_role("listitem")).to_have_count(2)  # cap, count
        expect(ledger).to_contain_text("Noisy row count released")
        expect(page.get_by_text("Exact rows (owner only)")).to_be_visible()
        page.get_by_label("k (number of centres)").fill(str(K))
        page.get_by_label("Epsilon (this job)").fill("2")
        preview = page.get_by_role("status", name="Cost preview")
        expect(preview).to_contain_text("This job would cost ε 2")
        expect(preview).not_to_contain_text("private summaries")
        expect(preview).not_to_contain_text("null")
        page.get_by_label("Private summaries: also release").check()
        expect(preview).to_contain_text("goes to the private summaries")
        expect(preview).to_contain_text("Budget after it")
        page.get_by_role("button", name="Submit job").click()

        # The job's page: its progress bar fills, then the centres are drawn, k of them.
        expect(page).to_have_url(re.compile(r"#/jobs/[0-9a-f-]{36}$"))
        job_id = page.url.rsplit("/", 1)[1]
        bar = page.get_by_role("progressbar", name=f"Progress of job {job_id[:8]}")
        expect(bar).to_be_visible()
        expect(page.locator(".badge")).to_have_text("succeeded", timeout=60_000)
        value, maximum = bar.evaluate("b => [b.value, b.max]")
        assert value == maximum >= 1
        picture = page.get_by_role("img", name=re.compile("^Centres of the job"))
        expect(picture).to_be_visible()
        expect(picture.locator("path.centre")).to_have_count(K)  # d = 3: parallel coordinates
        _shot(page, tmp_path, "job-parallel")
        page.get_by_label("Picture").select_option("scatter")
        page.get_by_label("Vertical axis").select_option("age")
        picture = page.get_by_role("img", name="Centres of the job: height against age")
        expect(picture.locator("circle.centre")).to_have_count(K)
        with stack.client(owner_key) as api:
            released = api.get(f"/v1/jobs/{job_id}").json()["result"]["centers"]
        assert len(released) == K
        _shot(page, tmp_path, "job", part=page.locator("section", has=picture))

        # Its private summaries: one bar per centre, the noisy loss with its standard error, and
        # for the owner the labels as a CSV (fetched with the key, one label per row).
        sizes = page.get_by_role("img", name=f"Noisy cluster sizes of the job, {K} centres")
        expect(sizes.locator("rect.bar")).to_have_count(K)
        expect(page.locator('[data-field="loss"]')).to_contain_text("±")
        with page.expect_download() as download:
            page.get_by_role("button", name="Download labels (CSV)").click()
        labels = Path(download.value.path()).read_text().split()
        assert labels[0] == "label" and len(labels) == 601
        assert {int(v) for v in labels[1:]} <= set(range(K))
        expect(page.locator("main")).not_to_contain_text("null")

        # The jobs page lists it finished; the dataset page's budget shows the spend.
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
        row = page.get_by_role("table", name="Jobs").locator(f'tr[data-job-id="{job_id}"]')
        expect(row).to_contain_text("succeeded")
        expect(row).to_contain_text("blobs")
        expect(row.get_by_role("progressbar")).to_have_attribute("value", re.compile(r"^[1-9]"))
        page.get_by_label("Show jobs with status").select_option("failed")
        expect(page.get_by_text("No failed jobs.")).to_be_visible()
        page.get_by_label("Show jobs with status").select_option("succeeded")
        expect(page.get_by_role("table", name="Jobs").get_by_role("row")).to_have_count(2)
        page.get_by_role("link", name="blobs").first.click()
        expect(page.get_by_role("list", name="Ledger entries, oldest first")).to_contain_text(
            "Job succeeded"
        )
        expect(page.get_by_role("status", name="Cost preview")).to_contain_text("would cost")
        _shot(page, tmp_path, "dataset")

        # Live, without reloading: with no worker a second job waits in the queue; once a worker
        # starts, its row's bar fills and the budget and ledger follow.
        for worker in stack.workers:
            worker.terminate()
            worker.wait(30)
        page.get_by_label("k (number of centres)").fill("2")
        page.get_by_label("Epsilon (this job)").fill("0.5")
        expect(page.get_by_role("status", name="Cost preview")).to_contain_text("would cost ε 0.5")
        page.get_by_role("button", name="Submit job").click()
        expect(page).to_have_url(re.compile(r"#/jobs/[0-9a-f-]{36}$"))
        second = page.url.rsplit("/", 1)[1]
        expect(page.locator(".badge")).to_have_text("queued")
        page.get_by_role("main").get_by_role("link", name="blobs").click()
        row = page.get_by_role("table", name="Jobs on blobs").locator(f'tr[data-job-id="{second}"]')
        expect(row).to_contain_text("queued")
        expect(row.get_by_role("progressbar")).to_have_attribute("value", "0")
        stack.start_worker()
        expect(row).to_contain_text("succeeded", timeout=60_000)
        done = row.get_by_role("progressbar").evaluate("b => [b.value, b.max]")
        assert done[0] == done[1] >= 1
        ledger = page.get_by_role("list", name="Ledger entries, oldest first")
        expect(ledger.get_by_text("Job succeeded")).to_have_count(2)
        expect(page.get_by_text("2 jobs charged to this budget.")).to_be_visible()

        # A sweep over k = 2, 3 from the dataset's page: priced, started, then its page draws
        # one point per k with error bars and marks the suggested k.
        page.get_by_label("Values of k").fill("2, 3")
        page.get_by_label("Epsilon (whole sweep)").fill("1")
        sweep_preview = page.get_by_role("status", name="Price of the sweep")
        expect(sweep_preview).to_contain_text("This sweep would cost ε 1")
        expect(sweep_preview).to_contain_text("2 jobs of about")
        page.get_by_role("button", name="Start sweep").click()
        expect(page).to_have_url(re.compile(r"#/sweeps/[0-9a-f-]{36}$"))
        sweep_id = page.url.rsplit("/", 1)[1]
        suggested = page.locator('[data-field="suggested_k"]')
        expect(suggested).to_have_text(re.compile("^[23]$"), timeout=60_000)
        with stack.client(owner_key) as api:
            sweep = api.get(f"/v1/sweeps/{sweep_id}").json()
        chart = page.get_by_role("img", name=f"Noisy loss against k for sweep {sweep_id[:8]}")
        expect(chart.locator("g.point")).to_have_count(2)
        marked = chart.locator("g.point.suggested")
        expect(marked).to_have_count(1)
        expect(marked).to_have_attribute("data-k", str(sweep["suggested_k"]))
        expect(suggested).to_have_text(str(sweep["suggested_k"]))
        jobs_table = page.get_by_role("table", name="Jobs of the sweep")
        expect(jobs_table.get_by_role("link")).to_have_count(2)
        expect(page.get_by_role("button", name=re.compile("^Cancel sweep"))).to_have_count(0)
        expect(page.locator("main")).not_to_contain_text("null")
        _shot(page, tmp_path, "sweep")
        jobs_table.get_by_role("link").first.click()
        expect(page.get_by_role("link", name=f"sweep {sweep_id[:8]}")).to_be_visible()
        two_bars = page.get_by_role("img", name="Noisy cluster sizes of the job, 2 centres")
        expect(two_bars.locator("rect.bar")).to_have_count(2)

        # With no worker, a second sweep waits; cancelling it cancels (and refunds) its jobs.
        for worker in stack.workers:
            worker.terminate()
            worker.wait(30)
        page.get_by_role("main").get_by_role("link", name="blobs").click()
        page.get_by_label("Values of k").fill("2, 3")
        page.get_by_label("Epsilon (whole sweep)").fill("0.5")
        expect(sweep_preview).to_contain_text("This sweep would cost ε 0.5")
        page.get_by_role("button", name="Start sweep").click()
        expect(page).to_have_url(re.compile(r"#/sweeps/[0-9a-f-]{36}$"))
        expect(page.locator("dl.meta .badge")).to_have_text("queued")
        page.get_by_role("button", name=re.compile("^Cancel sweep")).click()
        expect(page.locator("dl.meta .badge")).to_have_text("cancelled")
        jobs_table = page.get_by_role("table", name="Jobs of the sweep")
        expect(jobs_table.locator(".badge")).to_have_text(["cancelled", "cancelled"])
        expect(page.get_by_role("button", name=re.compile("^Cancel sweep"))).to_have_count(0)

        # The dataset's page lists both sweeps (GET /v1/sweeps), newest first, with their state.
        page.get_by_role("main").get_by_role("link", name="blobs").click()
        listed = page.get_by_role("list", name="Sweeps on this dataset").get_by_role("listitem")
        expect(listed).to_have_count(2)
        expect(listed.first).to_contain_text("cancelled")
        expect(listed.nth(1)).to_contain_text(f"sweep {sweep_id[:8]}")
        expect(listed.nth(1)).to_contain_text(f"suggested k {sweep['suggested_k']}")

        # The owner's list shows the exact count; the analyst's never does.
        page.get_by_role("link", name="Datasets", exact=True).first.click()
        owner_table = page.get_by_role("table", name="Datasets")
        exact = owner_table.get_by_role("columnheader", name="Exact rows (owner only)")
        expect(exact).to_be_visible()
        expect(owner_table.locator('[data-field="n_rows"]')).to_have_text("600")
        page.get_by_role("button", name="Sign out").click()
        assert page.evaluate("sessionStorage.length") == 0
        _sign_in(page, analyst_key)
        table = page.get_by_role("table", name="Datasets")
        expect(table.get_by_role("row")).to_have_count(2)
        expect(table.get_by_role("columnheader")).to_have_count(7)
        expect(table.get_by_role("columnheader", name=re.compile("Exact"))).to_have_count(0)
        expect(table.locator('[data-field="n_rows"]')).to_have_count(0)
        noisy = int(table.locator('[data-field="n_rows_dp"]').inner_text())
        expect(page.get_by_role("link", name="Upload")).to_be_hidden()
        page.get_by_role("link", name="blobs").click()
        expect(page.get_by_role("heading", name="blobs")).to_be_visible()
        expect(page.get_by_text("Exact rows")).to_have_count(0)
        if noisy != 600:  # the noisy count may equal N by chance; then there is nothing to see
            expect(page.locator("main")).not_to_contain_text("600")
        # A job over the remaining budget is priced, refused in the preview, not submittable.
        page.get_by_label("Epsilon (this job)").fill("50")
        expect(page.get_by_role("status", name="Cost preview")).to_contain_text("Over budget")
        expect(page.get_by_role("button", name="Submit job")).to_be_disabled()
        _shot(page, tmp_path, "analyst")
        # The analyst sees the same noisy summaries, and no labels button.
        page.goto(f"{stack.base_url}/console/#/jobs/{job_id}")
        sizes = page.get_by_role("img", name=f"Noisy cluster sizes of the job, {K} centres")
        expect(sizes.locator("rect.bar")).to_have_count(K)
        expect(page.get_by_role("button", name=re.compile("labels", re.I))).to_have_count(0)
        expect(page.get_by_text("Labels (owner only)")).to_have_count(0)
    finally:
        context.close()
    assert errors == [], errors
    assert external == [], external
