// All of the tenant's jobs, newest first, filtered by dataset, status and sweep, with live
// progress for the unfinished ones. The filters live in the address (#/jobs?dataset=&status=&
// sweep=), so a filtered list can be bookmarked and the back button undoes a filter.

import { api } from "../api.js";
import { h, shortId } from "../dom.js";
import { emptyState, listAll, liveJobsTable } from "../ui.js";

const STATUSES = ["queued", "running", "succeeded", "failed", "cancelled"];
const UUID = /^[0-9a-fA-F-]{36}$/;

function wanted() {
  const q = new URLSearchParams(location.hash.split("?")[1] || "");
  const id = (name) => (UUID.test(q.get(name) || "") ? q.get(name) : null);
  return { dataset: id("dataset"), sweep: id("sweep"), status: STATUSES.includes(q.get("status")) ? q.get("status") : null };
}

function address(filters) {
  const q = new URLSearchParams(Object.entries(filters).filter(([, v]) => v));
  const text = q.toString();
  return text ? `#/jobs?${text}` : "#/jobs";
}

/**
 * The jobs that pass the filters. The API filters by dataset and status; a sweep's jobs are
 * the (at most 32) ids its own page lists, read one by one and filtered the same way here.
 */
async function filteredJobs({ dataset, status, sweep }, signal) {
  if (sweep) {
    const sw = await api(`/v1/sweeps/${sweep}`, { signal });
    const jobs = await Promise.all(sw.jobs.map((j) => api(`/v1/jobs/${j.job_id}`, { signal })));
    return jobs
      .filter((j) => (!dataset || j.dataset_id === dataset) && (!status || j.status === status))
      .sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
  }
  const q = new URLSearchParams(Object.entries({ dataset_id: dataset, status }).filter(([, v]) => v)).toString();
  return listAll(`/v1/jobs${q ? `?${q}` : ""}`, signal, 200);
}

function select(name, label, options, chosen) {
  return h("label", { class: "filter" }, h("span", {}, label),
    h("select", { name, "aria-label": label },
      h("option", { value: "" }, "all"),
      options.map(([value, text]) => h("option", { value, selected: value === chosen }, text))));
}

export async function jobsView(main, { signal }) {
  const filters = wanted();
  const [jobs, datasets, sweeps] = await Promise.all([
    filteredJobs(filters, signal),
    listAll("/v1/datasets", signal),
    listAll("/v1/sweeps", signal, 200),
  ]);
  const names = new Map(datasets.map((d) => [d.id, d.name]));
  const caps = new Map(datasets.map((d) => [d.id, d.budget.mu_cap]));
  const bar = h("form", { class: "filters", "aria-label": "Filter the jobs" },
    select("dataset", "Dataset", datasets.map((d) => [d.id, d.name]), filters.dataset),
    select("status", "Status", STATUSES.map((s) => [s, s]), filters.status),
    select("sweep", "Sweep", sweeps.map((s) => [s.id, `sweep ${shortId(s.id)} · k ${s.ks.join(", ")} · ${names.get(s.dataset_id) || ""}`]),
      filters.sweep));
  bar.addEventListener("change", () => {
    const f = bar.elements;
    location.hash = address({ dataset: f.dataset.value, status: f.status.value, sweep: f.sweep.value });
  });
  const any = filters.dataset || filters.status || filters.sweep;
  main.replaceChildren(
    h("h1", {}, "Jobs"),
    h("p", { class: "lede" }, "Unfinished jobs update every second. Costs are charged when a job is admitted; ",
      "each one's share of its dataset's budget is (μ / μ cap)², and those shares add up."),
    bar,
    jobs.length
      ? h("div", { class: "scroll" }, liveJobsTable(jobs, { names, caps, signal, label: "Jobs" }))
      : emptyState(any ? "No jobs match these filters." : "No jobs yet.",
        any ? h("p", {}, h("a", { href: "#/jobs" }, "Show all jobs"), ".")
          : h("p", {}, "Open a ", h("a", { href: "#/datasets" }, "dataset"), " to price and submit one.")),
  );
}
