// All of the tenant's jobs, newest first, with live progress for the unfinished ones.

import { h } from "../dom.js";
import { emptyState, listAll, liveJobsTable } from "../ui.js";

const STATUSES = ["queued", "running", "succeeded", "failed", "cancelled"];

export async function jobsView(main, { signal }) {
  const wanted = new URLSearchParams(location.hash.split("?")[1] || "").get("status");
  const status = STATUSES.includes(wanted) ? wanted : null;
  const [jobs, datasets] = await Promise.all([
    listAll(`/v1/jobs${status ? `?status=${status}` : ""}`, signal, 200),
    listAll("/v1/datasets", signal),
  ]);
  const names = new Map(datasets.map((d) => [d.id, d.name]));
  const filter = h("select", { name: "status", "aria-label": "Show jobs with status" },
    h("option", { value: "" }, "all statuses"),
    STATUSES.map((s) => h("option", { value: s, selected: s === status }, s)));
  filter.addEventListener("change", () => {
    location.hash = filter.value ? `#/jobs?status=${filter.value}` : "#/jobs";
  });
  main.replaceChildren(
    h("h1", {}, "Jobs"),
    h("p", { class: "lede" }, "Unfinished jobs update every second. Costs are charged when a job is admitted.",
      " ", h("label", { class: "inline" }, "Show ", filter)),
    jobs.length
      ? h("div", { class: "scroll" }, liveJobsTable(jobs, { names, signal, label: "Jobs" }))
      : emptyState(status ? `No ${status} jobs.` : "No jobs yet.",
        h("p", {}, "Open a ", h("a", { href: "#/datasets" }, "dataset"), " to price and submit one.")),
  );
}
