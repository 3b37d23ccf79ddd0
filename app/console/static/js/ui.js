// Pieces shared by the views: the alert region, status badges, the live jobs table, polling.

import { api, ApiError, idempotentSubmitter } from "./api.js";
import { h, markInvalid, num, richText, shortId, time } from "./dom.js";
import { pct, progress, share } from "./gauges.js";

export const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
export const POLL_MS = 1000;
const MAX_FOLLOWED = 20;

const alertBox = () => document.getElementById("alert");

/** Show an error in the page's alert region: a problem's title, then its detail. */
export function showError(err, context) {
  if (err?.name === "AbortError") return;
  const box = alertBox();
  box.replaceChildren();
  if (err instanceof ApiError) {
    const p = err.problem;
    box.append(
      h("strong", {}, context ? `${context}: ` : "", p.title || `HTTP ${err.status}`),
      p.detail ? h("span", {}, " — ", richText(p.detail)) : null,
      p.code ? h("code", { class: "code" }, p.code) : null,
    );
  } else {
    box.append(h("strong", {}, context || "Something went wrong"), h("span", {}, ` — ${err?.message || err}`));
  }
  box.hidden = false;
}

export function clearError() {
  const box = alertBox();
  box.hidden = true;
  box.replaceChildren();
}

/** Sleep that ends early (rejecting) when the view is left. */
export function pause(ms, signal) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      reject(new DOMException("view left", "AbortError"));
    }, { once: true });
  });
}

/**
 * The button that cancels a job or a sweep: it POSTs to `path`, then `draw`s what the server
 * answers; when that fails it says why (under `failure`) and can be pressed again.
 */
export function cancelButton(path, label, failure, { draw, signal }) {
  return h("button", { type: "button", class: "danger", onclick: async (e) => {
    e.target.disabled = true;
    try {
      draw(await api(path, { method: "POST", signal }));
    } catch (err) {
      showError(err, failure);
      e.target.disabled = false;
    }
  } }, label);
}

/**
 * A form that admits work (a job, a sweep): on submit, `body()` (null: nothing to send) is
 * POSTed to `path` under an Idempotency-Key kept for a retry that got no answer
 * (idempotentSubmitter), and the page `page(created)` opens. A refusal is shown under
 * `failure`, the field it names is marked, and `refused()` lets the form price again.
 */
export function submitsWork(form, submit, { path, body, page, failure, sending, refused }) {
  const send = idempotentSubmitter();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const json = body();
    if (json === null) return;
    submit.disabled = true;
    if (sending) submit.textContent = sending;
    try {
      const created = await send(path, json);
      clearError();
      location.hash = page(created);
    } catch (err) {
      showError(err, failure);
      markInvalid(form, err.field);
      refused();
    }
  });
}

export function statusBadge(status) {
  return h("span", { class: `badge status-${status}` }, status);
}

/**
 * A dataset that is not ready yet (an import by reference): its status badge, how far the
 * import has read, and for owners why it failed. Null for a ready dataset.
 */
export function importState(ds) {
  if (!ds.status || ds.status === "ready") return null;
  if (ds.status === "importing") {
    const read = typeof ds.progress === "number" ? ` ${Math.floor(ds.progress * 100)}% read` : "";
    return h("span", { "data-field": "status" }, statusBadge("importing"), read);
  }
  return h("span", { "data-field": "status" }, statusBadge(ds.status),
    ds.failure_reason ? ` ${ds.failure_reason}` : "");
}

/** Why no `what` (jobs, sweeps) can run on a dataset yet, or null when they can. */
export function notRunnable(ds, what) {
  if (ds.deleted_at) return h("p", { class: "muted" }, `The rows of this dataset were deleted: no new ${what} can run on it.`);
  if (ds.status === "importing") {
    return h("p", { class: "muted" }, `${what[0].toUpperCase()}${what.slice(1)} can run once the import has read every row and released the noisy count.`);
  }
  if (ds.status === "failed") return h("p", { class: "muted" }, `The import failed: no ${what} can run on this dataset.`);
  return null;
}

/** A job's privacy cost in both currencies. */
export function cost(privacy) {
  return `ε ${num(privacy.epsilon)} at δ ${num(privacy.delta)} · μ ${num(privacy.mu)}`;
}

/**
 * A cost and what it takes of its dataset's budget, on the budget's one scale: (μ / μ cap)²,
 * which adds up over jobs where ε does not. Without the cap (unknown) the cost alone.
 */
export function costShare(privacy, muCap) {
  if (!(muCap > 0)) return cost(privacy);
  return h("span", { class: "cost" }, cost(privacy), " ",
    h("span", { class: "share", title: "(μ / μ cap)²: Gaussian-DP costs add in squares" },
      `· ${pct(share(privacy.mu, muCap))} of the budget`));
}

/** A problem's detail as text nodes (backticked names as code), for inline messages. */
export function problemText(err) {
  return richText(err?.problem?.detail || err?.message || String(err));
}

export function emptyState(title, ...body) {
  return h("div", { class: "empty", role: "status" }, h("p", {}, h("strong", {}, title)), ...body);
}

/** Table caption-less header row. */
function headRow(names) {
  return h("thead", {}, h("tr", {}, names.map((n) => h("th", { scope: "col" }, n))));
}

function jobRow(job, datasetName, muCap) {
  return h(
    "tr",
    { dataset: { jobId: job.id } },
    h("td", {}, h("a", { href: `#/jobs/${job.id}` }, shortId(job.id)),
      // A sweep's job says so, and leads to the sweep (its k is one of the sweep's).
      job.sweep_id ? [" ", h("a", { href: `#/sweeps/${job.sweep_id}`, class: "sweep-mark", "data-field": "sweep",
        title: `One of the jobs of sweep ${shortId(job.sweep_id)}` }, "sweep")] : null),
    datasetName === undefined ? null
      : h("td", {}, h("a", { href: `#/datasets/${job.dataset_id}` }, datasetName || shortId(job.dataset_id))),
    h("td", {}, job.algorithm),
    h("td", { class: "num" }, String(job.k)),
    h("td", {}, statusBadge(job.status)),
    h("td", {}, progress(job)),
    h("td", {}, costShare(job.privacy, muCap)),
    h("td", {}, time(job.created_at)),
  );
}

/**
 * A jobs table whose unfinished rows follow their job (GET /v1/jobs/{id} every second) until it
 * ends. `names` maps dataset ids to names; without it the dataset column is left out. `caps`
 * maps dataset ids to their mu cap (each cost's share of its budget). `onFinish(job)` is called
 * when a followed job ends.
 */
export function liveJobsTable(jobs, { names, caps, signal, label, onFinish }) {
  const withDataset = names !== undefined;
  const nameOf = (job) => (withDataset ? names.get(job.dataset_id) || "" : undefined);
  const row = (job) => jobRow(job, nameOf(job), caps?.get(job.dataset_id));
  const body = h("tbody", {}, jobs.map(row));
  const table = h(
    "table",
    { class: "jobs", "aria-label": label },
    headRow(["Job", ...(withDataset ? ["Dataset"] : []), "Algorithm", "k", "Status", "Progress",
      "Cost (share of the budget)", "Created"]),
    body,
  );
  // The newest unfinished jobs are followed; a page of hundreds of queued jobs would otherwise
  // send hundreds of requests a second.
  for (const job of jobs.filter((j) => !TERMINAL.has(j.status)).slice(0, MAX_FOLLOWED)) {
    follow(job.id, signal, (fresh) => {
      const shown = body.querySelector(`tr[data-job-id="${fresh.id}"]`);
      if (shown) shown.replaceWith(row(fresh));
      if (onFinish && TERMINAL.has(fresh.status)) onFinish(fresh);
    });
  }
  return table;
}

/** Poll one job until it ends or the view is left, calling `update` with every answer. */
export async function follow(jobId, signal, update) {
  for (;;) {
    try {
      await pause(POLL_MS, signal);
      const job = await api(`/v1/jobs/${jobId}`, { signal });
      update(job);
      if (TERMINAL.has(job.status)) return job;
    } catch (err) {
      if (err.name === "AbortError") return null;
      if (err.status === 401) {
        // The key was revoked meanwhile: main.js signs out and asks for another.
        window.dispatchEvent(new CustomEvent("privclust:unauthorized", { detail: err }));
        return null;
      }
      showError(err, "Could not refresh the job");
      if (err.status === 404) return null;
    }
  }
}

/** All pages of a list endpoint, up to `max` items. */
export async function listAll(path, signal, max = 1000) {
  const items = [];
  let cursor = null;
  do {
    const sep = path.includes("?") ? "&" : "?";
    const page = await api(`${path}${sep}limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, { signal });
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && items.length < max);
  return items;
}

/** A result's warnings (a noisy figure that is not informative), as a list; null without any. */
export function warningList(warnings) {
  if (!Array.isArray(warnings) || !warnings.length) return null;
  return h("ul", { class: "warnings", "aria-label": "Warnings" },
    warnings.map((w) => h("li", { dataset: { code: w.code || "" } }, richText(w.detail || w.code || String(w)))));
}
