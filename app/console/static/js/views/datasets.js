// The tenant's datasets: public metadata for everyone, the exact row count for owners only.

import { count, h, num, time } from "../dom.js";
import { budgetBar } from "../gauges.js";
import { emptyState, importState, listAll } from "../ui.js";

export async function datasetsView(main, { signal, me }) {
  const datasets = await listAll("/v1/datasets", signal);
  const owner = me.role === "owner";
  const heading = h("h1", {}, "Datasets");
  const intro = h("p", { class: "lede" },
    owner
      ? "Your tenant's datasets. The exact row count is shown to owners only; analysts see the noisy count."
      : "Your tenant's datasets. Row counts are the noisy counts released at upload (differentially private).");
  if (datasets.length === 0) {
    main.replaceChildren(heading, intro, emptyState(
      "No datasets yet.",
      owner
        ? h("p", {}, h("a", { href: "#/upload" }, "Upload a dataset"), " with its declared domain and privacy budget.")
        : h("p", {}, `An owner of tenant “${me.tenant}” uploads datasets; they appear here.`),
    ));
    return;
  }
  const columns = ["Name", "d", "Columns", "Rows (noisy)", ...(owner ? ["Exact rows (owner only)"] : []),
    "Budget left", "Created", "Deleted"];
  const table = h(
    "table",
    { class: "datasets", "aria-label": "Datasets" },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, datasets.map((ds) => h(
      "tr",
      { class: ds.deleted_at ? "deleted" : null, dataset: { datasetId: ds.id } },
      h("th", { scope: "row" }, h("a", { href: `#/datasets/${ds.id}` }, ds.name)),
      h("td", { class: "num" }, ds.n_cols === null ? "—" : String(ds.n_cols)),
      h("td", { class: "columns" }, columnList(ds.columns)),
      ds.n_rows_dp === null
        ? h("td", {}, importState(ds) || "—")
        : h("td", { class: "num" }, h("span", { "data-field": "n_rows_dp" }, count(ds.n_rows_dp)),
          ds.count_public || !ds.count_mu ? h("span", { class: "muted" }, " (public)")
            : h("span", { class: "muted", title: "± one standard deviation of the count's noise (1/μ of the count)" },
              ` ± ${num(1 / ds.count_mu, 2)}`)),
      owner ? h("td", { class: "num", "data-field": "n_rows" }, ds.n_rows === null ? "—" : count(ds.n_rows)) : null,
      h("td", { class: "budget-cell" }, budgetBar(ds.budget, { label: `Budget left of ${ds.name}` }),
        ` ε ${num(ds.budget.epsilon_remaining)} of ${num(ds.budget.epsilon)}`),
      h("td", {}, time(ds.created_at)),
      h("td", {}, ds.deleted_at ? time(ds.deleted_at) : h("span", { class: "muted" }, "—")),
    ))),
  );
  main.replaceChildren(heading, intro, h("div", { class: "scroll" }, table));
}

/** Column names, shortened when there are many (the full list is in the title). */
export function columnList(columns) {
  const shown = columns.length > 6 ? [...columns.slice(0, 5), `… ${columns.length - 5} more`] : columns;
  return h("span", { title: columns.join(", ") }, shown.join(", "));
}
