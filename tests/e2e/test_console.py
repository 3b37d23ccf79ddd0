"""The web console in a real browser: Playwright drives Chromium against real API and worker
processes. Without a Chromium (scripts/install-browser.sh installs Debian's) the tests skip,
unless PRIVCLUST_REQUIRE_BROWSER=1 (CI sets it once it has installed one): then they fail.

Every page a test checks is also saved as a PNG under the test's own tmp dir (`screens/`), to
be looked at; PRIVCLUST_CONSOLE_SCREENSHOTS=<dir> also refreshes the README's pictures there.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.kit.config import Settings
from tests.support.api import uploaded
from tests.support.browser import Console, launched, new_console, round_steps, shot
from tests.support.data import (
    CUSTOMER_COLUMNS,
    CUSTOMER_LOWER,
    CUSTOMER_UPPER,
    csv_bytes,
    customers,
)
from tests.support.services import Stack, running_stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.browser]

K = 3
# A zone with a name the browser prints ("EST"/"EDT"), so a time stamp without one shows.
ZONE = "America/New_York"
ZONE_NAME = re.compile(r"\b(EST|EDT)$")
# The warnings a finished sweep gives for suggesting no k (privclust's sweep_warnings).
NO_K_REASONS = ("sweep-inconclusive", "sweep-loss-rises", "sweep-elbow-unclear")


def _blobs_csv(path: Path, n: int = 600, d: int = 3) -> None:
    rng = np.random.default_rng(11)
    centers = rng.uniform(-6, 6, (K, d))
    x = centers[np.arange(n) % K] + rng.normal(0, 0.5, (n, d))
    path.write_bytes(csv_bytes(x, ["height", "weight", "age"][:d], digits=5))


def _every_time_names_its_zone(c: Console) -> int:
    stamps = c.page.locator("main time").all()
    for stamp in stamps:
        assert ZONE_NAME.search(stamp.inner_text()), stamp.inner_text()
        assert (stamp.get_attribute("title") or "").endswith("(UTC)")
    return len(stamps)


def _upload(c: Console, csv: Path, name: str, **domain: str) -> None:
    page = c.page
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Upload").click()
    page.get_by_label("Data file").set_input_files(str(csv))
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Epsilon").fill(domain.pop("epsilon", "4"))
    if "lower" in domain:
        page.get_by_label("Per-column bounds").check()
        page.get_by_label("Lower bounds").fill(domain["lower"])
        page.get_by_label("Upper bounds").fill(domain["upper"])
    else:
        page.get_by_label("Radius").fill(domain.get("radius", "12"))
    page.get_by_role("button", name="Upload").click()


def test_console_budget_ledger_costs_charts_and_roles(
    browser: Any, stack: Stack, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    owner_key, analyst_key = stack.new_keys()
    csv = tmp_path / "blobs.csv"
    _blobs_csv(csv)
    c = new_console(browser, stack, tmp_path, timezone=ZONE)
    page = c.page
    try:
        # A key that is not one: the problem is shown, and nothing else.
        page.goto(stack.base_url + "/console/")
        c.sign_in("pk_not-a-real-key")
        expect(page.get_by_role("alert")).to_contain_text("That key was not accepted")
        expect(page.get_by_role("navigation", name="Main")).to_be_hidden()

        # The owner signs in; an upload without a domain: the problem's detail is text, its
        # `names` shown as code, never as markdown source.
        c.sign_in(owner_key)
        expect(page.get_by_text("No datasets yet.")).to_be_visible()
        assert page.evaluate("sessionStorage.getItem('privclust.apiKey')") == owner_key
        assert page.evaluate("localStorage.length") == 0
        _upload(c, csv, "blobs", radius="")
        alert = page.get_by_role("alert")
        expect(alert).to_contain_text("The upload was refused")
        expect(alert.locator("code", has_text="radius")).to_have_count(1)
        expect(alert).not_to_contain_text("`")
        shot(c, "problem-as-text", part=alert)
        bad = tmp_path / "bad.csv"
        bad.write_text("height,weight,age\n1,2,3\n4,five,6\n")
        page.get_by_label("Radius").fill("12")
        # Import by reference is the same form with a source instead of the file.
        page.get_by_label("Import by reference").check()
        expect(page.get_by_label("Import from")).to_be_visible()
        expect(page.get_by_label("Data file")).to_be_hidden()
        page.get_by_label("Upload a file").check()
        page.get_by_label("Data file").set_input_files(str(bad))
        page.get_by_role("button", name="Upload").click()
        expect(alert).to_contain_text("non-numeric-value")
        expect(alert).to_contain_text("five")
        page.get_by_label("Data file").set_input_files(str(csv))
        page.get_by_role("button", name="Upload").click()

        # The dataset's page: one gauge that fills what remains, on one scale, with a legend
        # and the composition rule; the noisy row count with its error bar.
        expect(page.get_by_role("heading", name="blobs")).to_be_visible()
        gauge = page.get_by_role("meter", name="Budget remaining")
        expect(gauge).to_be_visible()
        legend = page.get_by_role("list", name="Budget legend")
        expect(legend).to_contain_text("Remaining")
        expect(legend).to_contain_text("Reserved")
        expect(legend).to_contain_text("Spent")
        expect(page.locator(".budget .composition")).to_contain_text("add in squares")
        # Beside the gauge: the pace (none yet) and the key caps, and what the cap guarantees.
        expect(page.get_by_label("Pace and key caps")).to_contain_text("lifetime guarantee")
        expect(page.get_by_role("heading", name="Spending per key")).to_be_visible()
        with stack.client(owner_key) as api:
            ds = api.get("/v1/datasets").json()["items"][0]
            # A cap on the owner's own key, wider than the dataset's: the price says what a job
            # leaves of it.
            me = api.get("/v1/me").json()["id"]
            cap = api.put(f"/v1/datasets/{ds['id']}/budget/keys/{me}", json={"mu": 50.0})
            assert cap.status_code == 200, cap.text
        b = ds["budget"]
        remaining = round(100 * b["mu_remaining"] ** 2 / b["mu_cap"] ** 2)
        assert gauge.get_attribute("aria-valuenow") == str(remaining)
        expect(gauge.locator("path.gauge-remaining")).to_have_count(1)
        expect(page.locator("main")).to_contain_text(f"{ds['n_rows_dp']} ± ")
        expect(page.get_by_text("Exact rows (owner only)")).to_be_visible()
        shot(c, "budget-gauge", part=page.locator("section", has=gauge))

        # A priced job: its cost, its share of the budget on the same scale, the budget after.
        page.get_by_label("k (number of centres)").fill(str(K))
        page.get_by_label("Epsilon (this job)").fill("2")
        preview = page.get_by_role("status", name="Cost preview")
        expect(preview).to_contain_text("This job would cost ε 2")
        expect(preview).to_contain_text("of the budget")
        expect(preview.get_by_role("meter", name="Budget after this job")).to_be_visible()
        expect(preview).to_contain_text("of your key's cap")
        expect(preview).not_to_contain_text("null")
        page.get_by_label("Private summaries: also release").check()
        expect(preview).to_contain_text("goes to the private summaries")
        expect(preview.locator('[data-field="duration"]')).to_contain_text("Expected run time")
        shot(c, "job-form", part=page.locator("form", has=preview))
        page.get_by_role("button", name="Submit job").click()

        # The job's page: progress, the cost's share of the budget, then the centres drawn at
        # the card's full width, each axis spanning its column's declared domain.
        expect(page).to_have_url(re.compile(r"#/jobs/[0-9a-f-]{36}$"))
        job_id = page.url.rsplit("/", 1)[1]
        bar = page.get_by_role("progressbar", name=f"Progress of job {job_id[:8]}")
        expect(bar).to_be_visible()
        expect(page.locator(".badge")).to_have_text("succeeded", timeout=60_000)
        value, maximum = bar.evaluate("b => [b.value, b.max]")
        assert value == maximum >= 1
        expect(page.locator("dl.meta")).to_contain_text("of the dataset's budget")
        picture = page.get_by_role("img", name=re.compile("^Centres of the job"))
        expect(picture.locator("path.centre")).to_have_count(K)  # d = 3: parallel coordinates
        ends = picture.evaluate("p => [...p.querySelectorAll('text.tick')].map(t => t.textContent)")
        assert "12" in ends and "-12" in ends, ends  # the ball's -12..12 on every axis
        c.fills_its_card(picture)
        shot(c, "job-parallel", part=page.locator("section", has=picture))
        page.get_by_label("Picture").select_option("scatter")
        page.get_by_label("Vertical axis").select_option("age")
        picture = page.get_by_role("img", name="Centres of the job: height against age")
        expect(picture.locator("circle.centre")).to_have_count(K)
        # On the same extent as the parallel view: the ball's -12..12, not the centres' own.
        ticks = picture.evaluate(
            "p => [...p.querySelectorAll('text.tick')].map(t => t.textContent)"
        )
        assert "-10" in ticks and "10" in ticks, ticks
        c.fills_its_card(picture)
        shot(c, "job-scatter", part=page.locator("section", has=picture))

        # Its private summaries: one bar per centre on round ticks, the noisy loss ± its SE.
        sizes = page.get_by_role("img", name=f"Noisy cluster sizes of the job, {K} centres")
        expect(sizes.locator("rect.bar")).to_have_count(K)
        round_steps(sizes)
        c.fills_its_card(sizes)
        with stack.client(owner_key) as api:
            result = api.get(f"/v1/jobs/{job_id}").json()["result"]
        if result.get("sizes_se"):
            expect(sizes.locator("line.error-bar")).to_have_count(3 * K)
        expect(page.locator('[data-field="loss"]')).to_contain_text("±")
        expect(page.locator('[data-field="loss"]')).to_contain_text("squared")
        with page.expect_download() as download:
            page.get_by_role("button", name="Download labels (CSV)").click()
        labels = Path(download.value.path()).read_text().split()
        assert labels[0] == "label" and len(labels) == 601
        assert {int(v) for v in labels[1:]} <= set(range(K))
        expect(page.locator("main")).not_to_contain_text("null")
        assert _every_time_names_its_zone(c) == 3  # created, started, finished
        shot(c, "job")

        # Live, without reloading: with no worker a second job waits in the queue; once a worker
        # starts, its row's bar fills and the budget and ledger follow.
        for worker in stack.workers:
            worker.terminate()
            worker.wait(30)
        page.get_by_role("main").get_by_role("link", name="blobs").click()
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
        expect(row).to_contain_text("of the budget")
        expect(row.get_by_role("progressbar")).to_have_attribute("value", "0")
        expect(page.get_by_role("list", name="Budget legend")).not_to_contain_text("Reserved 0%")
        stack.start_worker()
        expect(row).to_contain_text("succeeded", timeout=60_000)
        ledger = page.get_by_role("list", name="Ledger entries, newest first")
        expect(ledger.get_by_text("Job succeeded")).to_have_count(2)
        expect(ledger.get_by_role("listitem").first).to_contain_text("Job succeeded")
        expect(ledger.get_by_role("listitem").last).to_contain_text("Budget cap set")
        expect(ledger).to_contain_text("of the budget")

        # A sweep over k = 2, 3: priced with how its jobs compose, started, then its page draws
        # one point per k with error bars and marks the suggested k only if there is one.
        page.get_by_label("Values of k").fill("2, 3")
        page.get_by_label("Epsilon (whole sweep)").fill("1")
        sweep_preview = page.get_by_role("status", name="Price of the sweep")
        expect(sweep_preview).to_contain_text("This sweep would cost ε 1")
        expect(sweep_preview).to_contain_text("2 jobs of μ")
        expect(sweep_preview).to_contain_text("compose to")
        page.get_by_role("button", name="Start sweep").click()
        expect(page).to_have_url(re.compile(r"#/sweeps/[0-9a-f-]{36}$"))
        sweep_id = page.url.rsplit("/", 1)[1]
        expect(page.locator("dl.meta .badge")).to_have_text("succeeded", timeout=90_000)
        with stack.client(owner_key) as api:
            sweep = api.get(f"/v1/sweeps/{sweep_id}").json()
        chart = page.get_by_role("img", name=f"Noisy loss against k for sweep {sweep_id[:8]}")
        expect(chart.locator("g.point")).to_have_count(2)
        expect(chart.locator("g.point line.error-bar")).to_have_count(6)
        round_steps(chart)
        c.fills_its_card(chart)
        marked = chart.locator("g.point.suggested")
        if sweep["suggested_k"] is None:
            expect(marked).to_have_count(0)
            expect(page.locator("tr.suggested")).to_have_count(0)
            expect(page.locator('[data-field="suggested_k"]')).to_contain_text("none")
        else:
            expect(marked).to_have_count(1)
            expect(marked).to_have_attribute("data-k", str(sweep["suggested_k"]))
            expect(page.locator('[data-field="suggested_k"]')).to_have_text(
                str(sweep["suggested_k"])
            )
        expect(page.locator("dl.meta")).to_contain_text("compose to")
        expect(page.locator("main")).not_to_contain_text("null")
        shot(c, "sweep")

        # The Sweeps page in the navigation lists it; the jobs filtered by its sweep are its two.
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Sweeps").click()
        sweeps = page.get_by_role("table", name="Sweeps")
        expect(sweeps.locator(f'tr[data-sweep-id="{sweep_id}"]')).to_contain_text("2, 3")
        shot(c, "sweeps")
        sweeps.get_by_role("link", name="2 jobs").click()
        jobs = page.get_by_role("table", name="Jobs")
        expect(jobs.locator("tbody tr")).to_have_count(2)
        expect(page.get_by_label("Sweep")).to_have_value(sweep_id)
        expect(jobs.locator('[data-field="sweep"]')).to_have_count(2)  # each marked, linked
        expect(jobs.locator('[data-field="sweep"]').first).to_have_attribute(
            "href", f"#/sweeps/{sweep_id}"
        )

        # The jobs page: filtered by status and by dataset, each filter in the address.
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
        expect(jobs.locator("tbody tr")).to_have_count(4)  # two jobs and the sweep's two
        page.get_by_label("Status").select_option("failed")
        expect(page.get_by_text("No jobs match these filters.")).to_be_visible()
        page.get_by_label("Status").select_option("succeeded")
        expect(jobs.locator("tbody tr")).to_have_count(4)
        page.get_by_label("Dataset").select_option(label="blobs")
        expect(page).to_have_url(re.compile(r"#/jobs\?dataset=[0-9a-f-]{36}&status=succeeded$"))
        expect(jobs.locator(f'tr[data-job-id="{job_id}"]')).to_contain_text("of the budget")
        expect(jobs.locator(f'tr[data-job-id="{job_id}"] [data-field="sweep"]')).to_have_count(0)
        assert _every_time_names_its_zone(c) == 4
        shot(c, "jobs-filtered")

        # The ledger has outgrown its box: newest first, with a visible cue to scroll for more.
        page.get_by_role("link", name="blobs").first.click()
        ledger = page.get_by_role("list", name="Ledger entries, newest first")
        box = page.locator(".scroll-box")
        expect(box).to_have_class(re.compile("has-more"))
        expect(page.locator(".scroll-cue")).to_be_visible()
        shot(c, "ledger", part=page.locator("section", has=ledger))
        ledger.evaluate("l => l.scrollTo(0, l.scrollHeight)")
        expect(box).not_to_have_class(re.compile("has-more"))
        expect(page.locator(".scroll-cue")).to_be_hidden()
        assert _every_time_names_its_zone(c) >= 10
        shot(c, "dataset")

        # The owner's list shows the exact count; the analyst's never does.
        page.get_by_role("link", name="Datasets", exact=True).first.click()
        owner_table = page.get_by_role("table", name="Datasets")
        expect(
            owner_table.get_by_role("columnheader", name="Exact rows (owner only)")
        ).to_be_visible()
        expect(owner_table.locator('[data-field="n_rows"]')).to_have_text("600")
        expect(owner_table.get_by_role("meter", name="Budget left of blobs")).to_be_visible()
        page.get_by_role("button", name="Sign out").click()
        assert page.evaluate("sessionStorage.length") == 0
        c.sign_in(analyst_key)
        table = page.get_by_role("table", name="Datasets")
        expect(table.get_by_role("row")).to_have_count(2)
        expect(table.get_by_role("columnheader")).to_have_count(7)
        expect(table.get_by_role("columnheader", name=re.compile("Exact"))).to_have_count(0)
        expect(table.locator('[data-field="n_rows"]')).to_have_count(0)
        noisy = int(table.locator('[data-field="n_rows_dp"]').inner_text().replace("\u2009", ""))
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
        shot(c, "analyst")
        # The analyst sees the same noisy summaries, and no labels button.
        page.goto(f"{stack.base_url}/console/#/jobs/{job_id}")
        sizes = page.get_by_role("img", name=f"Noisy cluster sizes of the job, {K} centres")
        expect(sizes.locator("rect.bar")).to_have_count(K)
        expect(page.get_by_role("button", name=re.compile("labels", re.I))).to_have_count(0)
        expect(page.get_by_text("Labels (owner only)")).to_have_count(0)
        # A job this key does not see: a page that says so and leads to the lists.
        page.goto(f"{stack.base_url}/console/#/jobs/{'0' * 8}-0000-0000-0000-{'0' * 12}")
        expect(page.get_by_role("heading", name="No such job")).to_be_visible()
        page.get_by_role("link", name="All jobs").click()
        expect(page).to_have_url(re.compile(r"#/jobs$"))
        c.errors = [e for e in c.errors if "status of 404" not in e]  # the one asked for
    finally:
        c.close()
    c.assert_clean()


def test_console_at_400_px(browser: Any, stack: Stack, tmp_path: Path) -> None:
    """On a phone-sized window every page fits the width (tables and wide charts scroll in
    their own boxes) and the header, "Sign out" included, stays on screen."""
    from playwright.sync_api import expect

    owner_key, analyst_key = stack.new_keys()
    csv = tmp_path / "blobs.csv"
    _blobs_csv(csv)
    with stack.client(owner_key) as owner:
        ds = uploaded(owner, None, csv.read_bytes(), name="blobs", epsilon="4", radius="12")
    with stack.client(analyst_key) as analyst:
        job = analyst.post(
            f"/v1/datasets/{ds['id']}/jobs", json={"k": K, "epsilon": 1, "summaries": True}
        ).json()
    c = new_console(browser, stack, tmp_path, width=400, height=800)
    page = c.page
    try:
        page.goto(stack.base_url + "/console/")
        c.sign_in(analyst_key)
        for where, heading in (
            ("#/datasets", "Datasets"),
            (f"#/datasets/{ds['id']}", "blobs"),
            ("#/jobs", "Jobs"),
            ("#/sweeps", "Sweeps"),
            (f"#/jobs/{job['id']}", f"Job {job['id'][:8]}"),
        ):
            page.goto(f"{stack.base_url}/console/{where}")
            expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
            if "jobs/" in where:
                expect(page.locator(".badge")).to_have_text("succeeded", timeout=60_000)
                expect(
                    page.get_by_role("img", name=re.compile("^Noisy cluster sizes"))
                ).to_be_visible()
            sign_out = page.get_by_role("button", name="Sign out")
            expect(sign_out).to_be_in_viewport()
            box = sign_out.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 400, box
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 400, f"{where}: the page is {width} px wide"
            shot(
                c,
                "narrow-"
                + (where.strip("#/").split("/")[0] + ("-one" if "/" in where.strip("#/") else "")),
            )
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    finally:
        c.close()
    c.assert_clean()


COLUMNS, LOWER, UPPER = CUSTOMER_COLUMNS, CUSTOMER_LOWER, CUSTOMER_UPPER


def _customers(path: Path, n: int, seed: int) -> None:
    rows, _ = customers(n, seed)
    path.write_bytes(csv_bytes(np.clip(rows, LOWER, UPPER), COLUMNS, digits=3))


def test_console_box_dataset_target_accuracy_and_an_inconclusive_sweep(
    browser: Any, stack: Stack, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    owner_key, analyst_key = stack.new_keys()
    tight, wide = tmp_path / "customers.csv", tmp_path / "loose.csv"
    _customers(tight, 3000, 1)
    _customers(wide, 3000, 5)
    # The same kind of table under bounds 100 times wider than the data: every noisy loss of a
    # sweep is mostly noise. A sweep of 4 ks then suggests a k only if two of its noisy losses
    # differ by more than 2.64 standard errors of their difference (SWEEP_FALSE_ALARM, 5% split
    # over the 6 pairs), so by design up to 1 such sweep in 20 still suggests one; see below.
    with stack.client(owner_key) as owner:
        loose = uploaded(owner, None, wide.read_bytes(), name="loose", radius=None, epsilon="4",
                         lower=",".join(map(str, LOWER - 5000)),
                         upper=",".join(map(str, UPPER + 5000)))  # fmt: skip
    c = new_console(browser, stack, tmp_path, timezone=ZONE)
    page = c.page
    try:
        page.goto(stack.base_url + "/console/")
        c.sign_in(owner_key)
        expect(page.get_by_role("heading", name="Datasets")).to_be_visible()
        # Per-column bounds typed as the hint says, comma-separated.
        _upload(c, tight, "customers", lower="0, 0, 0, 0", upper="100, 200, 30, 1000")
        expect(page.get_by_role("heading", name="customers")).to_be_visible()
        dataset_id = page.url.rsplit("/", 1)[1]
        expect(page.locator("dl.meta")).to_contain_text("per-column bounds: age 0 to 100")
        expect(page.locator("dl.meta")).to_contain_text("spend 0 to 1000")

        # The form says how accurate the centres would be, column by column.
        page.get_by_label("k (number of centres)").fill("3")
        page.get_by_label("Epsilon (this job)").fill("1")
        preview = page.get_by_role("status", name="Cost preview")
        accuracy = preview.locator('[data-field="accuracy"]')
        expect(accuracy).to_contain_text("Expected accuracy")
        for name in COLUMNS:
            expect(accuracy).to_contain_text(f"{name} ± ")
        # Driven by a target instead: the estimate finds the smallest epsilon that meets it.
        page.get_by_label("a target accuracy").check()
        expect(page.get_by_label("Epsilon (this job)")).to_be_hidden()
        page.get_by_label("Target accuracy (% of each column's range)").fill("1")
        expect(preview).to_contain_text("The smallest ε that meets ± 1% is ε ")
        submit = page.get_by_role("button", name=re.compile(r"^Submit job at ε "))
        expect(submit).to_be_enabled()
        shot(c, "target-accuracy", part=page.locator("form", has=preview))
        with stack.client(analyst_key) as api:
            est = api.post(
                f"/v1/datasets/{dataset_id}/jobs/estimate",
                json={"k": 3, "target_centre_std_fraction": 0.01},
            ).json()
        assert max(est["accuracy"]["centre_std_fraction"]) <= 0.01 + 1e-12
        submit.click()
        expect(page).to_have_url(re.compile(r"#/jobs/[0-9a-f-]{36}$"))
        expect(page.locator(".badge")).to_have_text("succeeded", timeout=90_000)
        job_id = page.url.rsplit("/", 1)[1]
        with stack.client(analyst_key) as api:
            job = api.get(f"/v1/jobs/{job_id}").json()
        assert job["privacy"]["epsilon"] == pytest.approx(est["privacy"]["epsilon"])
        # Parallel coordinates: every axis spans its own declared range, in its own units.
        picture = page.get_by_role("img", name=re.compile("^Centres of the job"))
        expect(picture.locator("path.centre")).to_have_count(3)
        ticks = picture.evaluate(
            "p => [...p.querySelectorAll('text.tick')].map(t => t.textContent)"
        )
        ticks = [t.replace("\u2009", "") for t in ticks]  # thousands are set apart thinly
        for bound in ("100", "200", "30", "1000", "0"):
            assert bound in ticks, ticks
        c.fills_its_card(picture)
        shot(c, "box-job", part=page.locator("section", has=picture))

        # A sweep on the loose table: the noisy losses cannot tell the ks apart, so no k is
        # suggested or highlighted, and the page says why. The service draws its own noise, and
        # its rule lets noise alone suggest a k in up to 1 sweep in 20: such a sweep must show
        # the k the rule gives, and the next sweep is tried (4 suggest one in at most 1 in
        # 160,000, since a suggestion needs two losses told apart, at most 1 in 20 by design;
        # 4 sweeps of epsilon 1 compose under mu-GDP to about epsilon 2.2, within the table's 4).
        from privclust.clustering.sweeps import suggest_k

        for _ in range(4):
            page.goto(f"{stack.base_url}/console/#/datasets/{loose['id']}")
            page.get_by_label("Values of k").fill("2, 3, 4, 5")
            page.get_by_label("Epsilon (whole sweep)").fill("1")
            sweep_preview = page.get_by_role("status", name="Price of the sweep")
            expect(sweep_preview).to_contain_text("4 jobs of μ")
            expect(sweep_preview.locator('[data-field="accuracy"]')).to_contain_text("at k = 5")
            page.get_by_role("button", name="Start sweep").click()
            expect(page).to_have_url(re.compile(r"#/sweeps/[0-9a-f-]{36}$"))
            expect(page.locator("dl.meta .badge")).to_have_text("succeeded", timeout=120_000)
            sweep_id = page.url.rsplit("/", 1)[1]
            with stack.client(analyst_key) as api:
                sweep = api.get(f"/v1/sweeps/{sweep_id}").json()
            losses = [job["loss"] for job in sweep["jobs"]]
            ses = [job["loss_se"] for job in sweep["jobs"]]
            assert sweep["suggested_k"] == suggest_k(sweep["ks"], losses, ses), sweep
            if sweep["suggested_k"] is None:
                break
            expect(page.locator('[data-field="suggested_k"]')).to_contain_text(
                str(sweep["suggested_k"])
            )
        assert sweep["suggested_k"] is None, sweep
        expect(page.locator('[data-field="suggested_k"]')).to_contain_text("none")
        # Why none, as the service found it: mostly that no two losses differ by more than
        # noise explains; by the same rule's chance, that one rises with k or that the elbow
        # moves with the noise. The page says the reason the service gave.
        (why,) = [w for w in sweep["warnings"] if w["code"] in NO_K_REASONS]
        warnings = page.get_by_role("list", name="Warnings")
        reason = warnings.locator(f'li[data-code="{why["code"]}"]')
        expect(reason).to_contain_text(why["detail"].split(" (")[0])
        chart = page.get_by_role("img", name=f"Noisy loss against k for sweep {sweep_id[:8]}")
        expect(chart.locator("g.point")).to_have_count(4)
        expect(chart.locator("g.point.suggested")).to_have_count(0)
        expect(chart.locator("text", has_text="suggested")).to_have_count(0)
        expect(page.locator("tr.suggested")).to_have_count(0)
        expect(page.get_by_text("(suggested)")).to_have_count(0)
        expect(chart).to_contain_text("loss, scaled space")  # the loss's space, on its axis
        expect(page.locator("main")).to_contain_text("squared fractions of each column's")
        round_steps(chart)
        shot(c, "inconclusive-sweep")
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Sweeps").click()
        row = page.get_by_role("table", name="Sweeps").locator(f'tr[data-sweep-id="{sweep_id}"]')
        expect(row).to_contain_text("none")
        # One of its jobs: its warnings, and its noisy sizes with error bars.
        page.goto(f"{stack.base_url}/console/#/jobs/{sweep['jobs'][0]['job_id']}")
        expect(page.get_by_role("list", name="Warnings")).to_be_visible()
        sizes = page.get_by_role("img", name=re.compile("^Noisy cluster sizes"))
        expect(sizes.locator("line.error-bar")).to_have_count(3 * 2)
        shot(c, "inconclusive-sweep-job")
    finally:
        c.close()
    c.assert_clean()


def test_console_follows_an_import_until_it_is_ready(
    browser: Any, settings: Settings, tmp_path: Path
) -> None:
    """A dataset imported by reference is `importing` until a worker has read it: the list and
    its page say so (no d, no count, no job form), and the page follows it to `ready`."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from playwright.sync_api import expect

    lake = tmp_path / "lake"
    lake.mkdir()
    rows = np.random.default_rng(3).normal(size=(400, 3))
    table = pa.table({name: rows[:, j] for j, name in enumerate(("north", "east", "depth"))})
    pq.write_table(table, lake / "survey.parquet")
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    with running_stack(
        log_dir,
        settings.resolved_database_url,
        workers=0,
        PRIVCLUST_IMPORT_SOURCES=str(lake),
        PYTHONUNBUFFERED="1",
    ) as stack:
        owner_key, _ = stack.new_keys()
        form = {"name": "survey", "epsilon": "2", "delta": "1e-6", "radius": "10",
                "source": str(lake / "survey.parquet")}  # fmt: skip
        with stack.client(owner_key) as owner:
            r = owner.post("/v1/datasets", files={k: (None, v) for k, v in form.items()})
        assert r.status_code == 202 and r.json()["status"] == "importing", r.text
        c = new_console(browser, stack, tmp_path)
        page = c.page
        try:
            page.goto(stack.base_url + "/console/")
            c.sign_in(owner_key)
            row = page.get_by_role("table", name="Datasets").locator("tbody tr").first
            expect(row.locator('[data-field="status"]')).to_contain_text("importing")
            expect(row.locator("td").first).to_have_text("—")  # d is not known yet
            row.get_by_role("link", name="survey").click()
            meta = page.locator("dl.meta")
            expect(meta).to_contain_text("importing")
            expect(meta).to_contain_text("released when the import has read every row")
            expect(meta).to_contain_text("ball of radius 10 around the origin")
            expect(page.get_by_text("Jobs can run once the import")).to_be_visible()
            expect(page.get_by_label("k (number of centres)")).to_have_count(0)
            shot(c, "importing")
            stack.start_worker()  # the import runs; the page shows it ready by itself
            expect(meta).to_contain_text("3: north, east, depth", timeout=60_000)
            expect(page.locator('[data-field="status"]')).to_have_count(0)
            expect(page.get_by_label("k (number of centres)")).to_be_visible()
        finally:
            c.close()
    c.assert_clean()


@pytest.fixture(scope="module")
def browser() -> Any:
    with launched() as b:
        yield b
