// One dataset: its public metadata, its budget as gauges with the ledger as a timeline, its jobs,
// and a form that prices a job (the estimate endpoint) before submitting it.

import { api } from "../api.js";
import { count, h, num, shortId, time } from "../dom.js";
import { datasetPanels } from "../extensions.js";
import { budgetGauge, pct, share } from "../gauges.js";
import { emptyState, importState, listAll, liveJobsTable, notRunnable, pause, showError } from "../ui.js";
import { budgetLimits, spendingByKey } from "../limits.js";
import { jobForm } from "./jobform.js";

const KINDS = {
  cap: "Budget cap set",
  count: "Noisy row count released",
  reserve: "Job admitted: budget reserved",
  commit: "Job started: charge committed",
  refund: "Reservation refunded",
  succeeded: "Job succeeded",
  failed: "Job failed",
  cancelled: "Job cancelled",
};

export async function datasetView(main, { params: [id], signal, me }) {
  const [ds, budget, ledger, jobs] = await Promise.all([
    api(`/v1/datasets/${id}`, { signal }),
    api(`/v1/datasets/${id}/budget`, { signal }),
    api(`/v1/datasets/${id}/ledger`, { signal }),
    listAll(`/v1/jobs?dataset_id=${id}`, signal),
  ]);
  if (ds.status === "importing") {
    // The import runs on a worker: show this page again, as it is then, every 2 s until it ends.
    pause(2000, signal)
      .then(() => datasetView(main, { params: [id], signal, me }))
      .catch((err) => { if (err?.name !== "AbortError") showError(err, "Could not follow the import"); });
  }
  const panels = datasetPanels.map((panel) => panel(ds, { signal, me })).filter(Boolean);
  const gauges = (b) => [budgetGauge(b, { countMu: ds.count_mu }), budgetLimits(b)];
  const budgetBox = h("div", {}, gauges(budget));
  const ledgerBox = h("div", {}, timeline(ledger.entries, budget.mu_cap));
  const spendBox = h("div", {}, spendingByKey(ledger.entries));
  // A job that ends moves the budget (a refund) and the ledger: show them as they are now.
  const onFinish = async () => {
    try {
      const [b, l] = await Promise.all([
        api(`/v1/datasets/${id}/budget`, { signal }),
        api(`/v1/datasets/${id}/ledger`, { signal }),
      ]);
      budgetBox.replaceChildren(...gauges(b));
      ledgerBox.replaceChildren(timeline(l.entries, b.mu_cap));
      spendBox.replaceChildren(spendingByKey(l.entries));
    } catch (err) {
      showError(err, "Could not refresh the budget");
    }
  };
  main.replaceChildren(
    h("p", { class: "crumbs" }, h("a", { href: "#/datasets" }, "Datasets"), " / "),
    h("h1", {}, ds.name),
    metadata(ds),
    h("div", { class: "two" },
      h("section", { "aria-labelledby": "budget-title", class: "card" },
        h("h2", { id: "budget-title" }, "Privacy budget"), budgetBox),
      h("section", { "aria-labelledby": "ledger-title", class: "card" },
        h("h2", { id: "ledger-title" }, "Ledger"), ledgerBox)),
    h("section", { "aria-labelledby": "spend-title", class: "card" },
      h("h2", { id: "spend-title" }, "Spending per key"), spendBox),
    h("section", { "aria-labelledby": "new-job-title", class: "card" },
      h("h2", { id: "new-job-title" }, "New job"),
      notRunnable(ds, "jobs") || jobForm(ds, budget)),
    h("section", { "aria-labelledby": "jobs-title" },
      h("h2", { id: "jobs-title" }, "Jobs on this dataset"),
      jobs.length
        ? h("div", { class: "scroll" }, liveJobsTable(jobs, { signal, label: `Jobs on ${ds.name}`, onFinish,
          caps: new Map([[ds.id, budget.mu_cap]]) }))
        : emptyState("No jobs yet.", notRunnable(ds, "jobs") ? null
          : h("p", {}, "Price one with the form above, then submit it."))),
    ...panels,
  );
}

function metadata(ds) {
  const state = importState(ds);
  const rows = [
    state ? ["Status", state] : null,
    ds.n_cols === null
      ? ["Columns (d)", ds.columns.length ? `not read yet (asked for: ${ds.columns.join(", ")})` : "not read yet"]
      : ["Columns (d)", `${ds.n_cols}: ${ds.columns.join(", ")}`],
    ds.n_rows_dp === null ? ["Rows (noisy, n_rows_dp)", "released when the import has read every row"]
      : ["Rows (noisy, n_rows_dp)", ds.count_public || !ds.count_mu
      ? `${count(ds.n_rows_dp)} (declared public: exact)`
      : h("span", {}, h("span", { "data-field": "n_rows_dp" }, count(ds.n_rows_dp)), ` ± ${num((ds.max_rows_per_unit || 1) / ds.count_mu, 2)}`,
        h("span", { class: "muted" }, " (± one standard deviation of its noise, m/μ of the count)"))],
    ds.n_rows === null || ds.n_rows === undefined ? null : ["Exact rows (owner only)", count(ds.n_rows)],
    ["Neighbouring relation", ds.relation],
    ["Unit of privacy", ds.privacy_unit === "row"
      ? "one row (the guarantee protects one row, not one person)"
      : `all the rows of one ${ds.privacy_unit}, at most ${ds.max_rows_per_unit} of them`],
    ["Missing values", ds.missing + (Object.keys(ds.fill || {}).length ? ` (fill: ${JSON.stringify(ds.fill)})` : "")],
    Object.keys(ds.categories || {}).length
      ? ["Categories", `${JSON.stringify(ds.categories)}, weight ${ds.category_weight}`] : null,
    ds.table_counts ? ["What the policy did (owner only)", Object.entries(ds.table_counts).map(([k, v]) => `${k} ${v}`).join(", ")] : null,
    ["Cost of the row count", ds.count_mu === null ? "none (declared public)" : `μ ${num(ds.count_mu)}`],
    ["Declared domain", domainText(ds)],
    ds.kind === "federated" ? ["Federation", federationText(ds)] : null,
    ["Created", time(ds.created_at)],
    ["Rows deleted", ds.deleted_at ? time(ds.deleted_at) : "no"],
  ].filter(Boolean);
  return h("div", {},
    h("dl", { class: "meta", "aria-label": "Dataset" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    ds.warnings.length ? h("ul", { class: "warnings", "aria-label": "Warnings" }, ds.warnings.map((w) => h("li", {}, w))) : null,
  );
}

/** A federated dataset's members in public order, with the fingerprints owners compare. */
function federationText(ds) {
  return h("div", {},
    h("p", { class: "small muted" },
      `No row is stored here: every release is the members' secure sum; c = ${ds.colluding}. ` +
      "Compare each fingerprint with the member's owner out of band."),
    h("ol", { "aria-label": "Members" }, (ds.members || []).map((m) =>
      h("li", {}, `${m.url} (dataset ${shortId(m.dataset_id)}): `,
        h("code", { "data-field": "fingerprint" }, m.fingerprint)))));
}

/** The declared public domain: per-column bounds (a box) or a ball. */
function domainText(ds) {
  const d = ds.domain;
  const vec = (xs) => `(${xs.map((c) => num(c)).join(", ")})`;
  if (Array.isArray(d.lower) && Array.isArray(d.upper)) {
    // An import's columns may not be read yet: its bounds are named by position until then.
    const name = (j) => ds.columns[j] ?? `column ${j + 1}`;
    return `per-column bounds: ${d.lower.map((lo, j) => `${name(j)} ${num(lo)} to ${num(d.upper[j])}`).join("; ")}`;
  }
  return `ball of radius ${num(d.radius)} around ${Array.isArray(d.center) && d.center.length ? vec(d.center) : "the origin"}`;
}

/** The ledger, newest first, in a box that scrolls and says so while older entries are hidden. */
function timeline(entries, muCap) {
  if (!entries.length) return emptyState("The ledger is empty.");
  const list = h("ol", { class: "timeline", tabindex: "0", "aria-label": "Ledger entries, newest first" },
    [...entries].reverse().map((e) => h("li", { class: `kind-${e.kind}` },
      h("span", { class: "dot", "aria-hidden": "true" }),
      h("div", {},
        h("strong", {}, KINDS[e.kind] || e.kind),
        e.job_id ? [" · ", h("a", { href: `#/jobs/${e.job_id}` }, `job ${shortId(e.job_id)}`)] : null,
        h("div", { class: "small" },
          time(e.created_at),
          e.mu !== null ? ` · μ ${num(e.mu)}` : "",
          e.mu !== null && e.kind !== "cap" ? ` (${pct(share(e.mu, muCap))} of the budget)` : "",
          e.epsilon !== null ? ` · ε ${num(e.epsilon)}` : "",
          e.sigma !== null ? ` · σ ${num(e.sigma)}` : "",
          e.iterations ? ` · ${e.iterations} release${e.iterations === 1 ? "" : "s"}` : ""),
        e.note ? h("div", { class: "small muted" }, e.note) : null),
    )));
  const cue = h("p", { class: "scroll-cue", "aria-hidden": "true" }, "↓ Scroll for older entries");
  const box = h("div", { class: "scroll-box" }, list, cue);
  // The cue shows while older entries are out of sight (the box overflows and is not
  // scrolled to its end), so a list cut at the box's edge never looks complete.
  const update = () => box.classList.toggle("has-more", list.scrollHeight - list.clientHeight - list.scrollTop > 4);
  list.addEventListener("scroll", update, { passive: true });
  if (typeof ResizeObserver !== "undefined") new ResizeObserver(update).observe(list);
  return h("div", {}, box,
    h("p", { class: "muted small" }, `${entries.length} entries, newest first. `,
      "A job's μ shows when it is admitted (reserved) and again when it starts (committed); its share is ",
      "(μ / μ cap)², and the shares of the row count and of every job add up to what is used."));
}
