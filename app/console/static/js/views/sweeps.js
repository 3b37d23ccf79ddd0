// All of the tenant's sweeps over k, newest first, optionally of one dataset: each one's values
// of k, status, cost and suggested k (or that its noisy losses could not tell the ks apart).

import { h, num, shortId, time } from "../dom.js";
import { emptyState, listAll, statusBadge } from "../ui.js";

const UUID = /^[0-9a-fA-F-]{36}$/;

function suggestedCell(sw) {
  if (sw.suggested_k !== null && sw.suggested_k !== undefined) return h("strong", {}, String(sw.suggested_k));
  if (sw.status !== "succeeded") return h("span", { class: "muted" }, "—");
  return h("span", { class: "muted" }, "none", sw.warnings?.length ? " (see its warning)" : "");
}

export async function sweepsView(main, { signal }) {
  const wanted = new URLSearchParams(location.hash.split("?")[1] || "").get("dataset");
  const dataset = UUID.test(wanted || "") ? wanted : null;
  const [sweeps, datasets] = await Promise.all([
    listAll(`/v1/sweeps${dataset ? `?dataset_id=${dataset}` : ""}`, signal, 200),
    listAll("/v1/datasets", signal),
  ]);
  const names = new Map(datasets.map((d) => [d.id, d.name]));
  const filter = h("select", { name: "dataset", "aria-label": "Dataset" },
    h("option", { value: "" }, "all"),
    datasets.map((d) => h("option", { value: d.id, selected: d.id === dataset }, d.name)));
  filter.addEventListener("change", () => {
    location.hash = filter.value ? `#/sweeps?dataset=${filter.value}` : "#/sweeps";
  });
  const table = h("table", { "aria-label": "Sweeps" },
    h("thead", {}, h("tr", {}, ["Sweep", "Dataset", "Values of k", "Status", "Cost (whole sweep)", "Suggested k", "Jobs", "Created"]
      .map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, sweeps.map((sw) => h("tr", { dataset: { sweepId: sw.id } },
      h("td", {}, h("a", { href: `#/sweeps/${sw.id}` }, `sweep ${shortId(sw.id)}`)),
      h("td", {}, h("a", { href: `#/datasets/${sw.dataset_id}` }, names.get(sw.dataset_id) || shortId(sw.dataset_id))),
      h("td", {}, sw.ks.join(", ")),
      h("td", {}, statusBadge(sw.status)),
      h("td", {}, `ε ${num(sw.privacy.epsilon)} · μ ${num(sw.privacy.mu)} (μ ${num(sw.privacy.job_mu)} per job)`),
      h("td", {}, suggestedCell(sw)),
      h("td", {}, h("a", { href: `#/jobs?sweep=${sw.id}` }, `${sw.jobs.length} jobs`)),
      h("td", {}, time(sw.created_at))))));
  main.replaceChildren(
    h("h1", {}, "Sweeps"),
    h("p", { class: "lede" }, "Sweeps over k: one summarised job per k, admitted and charged as one. ",
      "Start one from a dataset's page."),
    h("form", { class: "filters", "aria-label": "Filter the sweeps" }, h("label", { class: "filter" }, h("span", {}, "Dataset"), filter)),
    sweeps.length
      ? h("div", { class: "scroll" }, table)
      : emptyState(dataset ? "No sweeps on this dataset." : "No sweeps yet.",
        h("p", {}, "Open a ", h("a", { href: "#/datasets" }, "dataset"), " to price and start one.")),
  );
}
