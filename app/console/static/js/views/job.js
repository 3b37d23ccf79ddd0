// One job: status, live progress, privacy cost and, once it succeeded, a picture of its private
// centres (the released centres only: the console never has a data row to draw).

import { api, fetchBlob, saveBlob } from "../api.js";
import { legend, parallel, progress, scatter, sizeBars } from "../charts.js";
import { field, h, num, shortId, time } from "../dom.js";
import { cost, follow, showError, statusBadge, TERMINAL } from "../ui.js";

export async function jobView(main, { params: [id], signal, me }) {
  const job = await api(`/v1/jobs/${id}`, { signal });
  const ds = await api(`/v1/datasets/${job.dataset_id}`, { signal }).catch(() => null);
  const summary = h("div", {});
  const picture = h("section", { "aria-labelledby": "centres-title", class: "card" });
  const summaries = h("div", {});
  main.replaceChildren(
    h("p", { class: "crumbs" }, h("a", { href: "#/jobs" }, "Jobs"), " / ",
      ds ? h("a", { href: `#/datasets/${ds.id}` }, ds.name) : null),
    h("h1", {}, `Job ${String(job.id).slice(0, 8)}`),
    summary,
    picture,
    summaries,
  );
  const draw = (j) => {
    summary.replaceChildren(details(j, signal, draw));
    if (j.status === "succeeded" && j.result) {
      if (!picture.dataset.drawn) {
        centresPicture(picture, j.result, j.k);
        summaries.replaceChildren(...summaryCards(j, me, signal));
      }
    } else {
      picture.replaceChildren(
        h("h2", { id: "centres-title" }, "Centres"),
        h("p", { class: "muted", role: "status" },
          TERMINAL.has(j.status) ? `This job ${j.status}: it released no centres.` : "The centres appear here when the job succeeds."));
    }
  };
  draw(job);
  if (!TERMINAL.has(job.status)) follow(job.id, signal, draw);
}

function details(job, signal, draw) {
  const rows = [
    ["Status", statusBadge(job.status)],
    ["Progress", progress(job)],
    ["Algorithm", job.algorithm],
    ["k", String(job.k)],
    ["Cost", `${cost(job.privacy)} · σ ${num(job.privacy.sigma)} · ${job.privacy.iterations} releases`],
    ["Private summaries", job.summaries
      ? `yes: μ ${num(job.privacy.summary_mu)} of the job's μ ${num(job.privacy.mu)} (noisy sizes and loss)` : "no"],
    job.sweep_id ? ["Sweep", h("a", { href: `#/sweeps/${job.sweep_id}` }, `sweep ${shortId(job.sweep_id)}`)] : null,
    ["Created", time(job.created_at)],
    ["Started", time(job.started_at)],
    ["Finished", time(job.finished_at)],
  ].filter(Boolean);
  if (job.error) rows.push(["Error", h("span", { class: "error" }, job.error)]);
  const cancel = !TERMINAL.has(job.status) && !job.cancel_requested
    ? h("button", { type: "button", class: "danger", onclick: async (e) => {
      e.target.disabled = true;
      try {
        draw(await api(`/v1/jobs/${job.id}/cancel`, { method: "POST", signal }));
      } catch (err) {
        showError(err, "Could not cancel the job");
        e.target.disabled = false;
      }
    } }, job.status === "queued" ? "Cancel (refunded)" : "Stop (stays charged)")
    : null;
  return h("div", {},
    h("dl", { class: "meta", "aria-label": "Job" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    job.cancel_requested && !TERMINAL.has(job.status) ? h("p", { class: "muted" }, "Cancellation requested.") : null,
    cancel);
}

/** Scatter over two chosen columns, or parallel coordinates (the default when d > 2). */
function centresPicture(section, result, k) {
  section.dataset.drawn = "true";
  const { centers, columns } = result;
  const d = columns.length;
  const options = (selected) => columns.map((c, i) => h("option", { value: String(i), selected: i === selected }, c));
  const kind = h("select", { name: "kind" },
    h("option", { value: "scatter" }, "Scatter of two columns"),
    d > 1 ? h("option", { value: "parallel", selected: d > 2 }, "Parallel coordinates") : null);
  const xCol = h("select", { name: "x" }, options(0));
  const yCol = h("select", { name: "y" }, options(Math.min(1, d - 1)));
  const axes = h("div", { class: "row" }, field("Horizontal axis", xCol), field("Vertical axis", yCol));
  const holder = h("div", { class: "plot-holder" });
  const redraw = () => {
    const parallelView = kind.value === "parallel";
    axes.hidden = parallelView;
    const title = parallelView
      ? `Centres of the job: parallel coordinates over ${d} columns`
      : `Centres of the job: ${columns[xCol.value]} against ${columns[yCol.value]}`;
    holder.replaceChildren(parallelView
      ? parallel(centers, columns, title)
      : scatter(centers, columns, Number(xCol.value), Number(yCol.value), title));
  };
  for (const control of [kind, xCol, yCol]) control.addEventListener("change", redraw);
  section.replaceChildren(
    h("h2", { id: "centres-title" }, "Centres"),
    h("p", { class: "muted" }, `${k} differentially private centres, in the data's original coordinates.`),
    h("div", { class: "row" }, field("Picture", kind)),
    axes,
    holder,
    legend(centers.length),
    h("details", {}, h("summary", {}, "Centres as numbers"), centresTable(centers, columns)),
  );
  redraw();
}

function centresTable(centers, columns) {
  return h("div", { class: "scroll" }, h("table", { "aria-label": "Centres" },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "#"), columns.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, centers.map((c, i) => h("tr", {}, h("th", { scope: "row" }, String(i + 1)),
      c.map((v) => h("td", { class: "num" }, num(v, 4))))))));
}

/**
 * A succeeded job's private summaries (noisy sizes as bars, the noisy loss with its standard
 * error) and, for the dataset's owner, the labels download. Both come from the API as they are:
 * the sizes and loss are DP releases, the labels post-processing of the released centres.
 */
function summaryCards(job, me, signal) {
  const out = [];
  const { sizes, loss, loss_se: se } = job.result;
  if (sizes) {
    out.push(h("section", { "aria-labelledby": "sizes-title", class: "card" },
      h("h2", { id: "sizes-title" }, "Private summaries"),
      h("p", { class: "muted" }, "Noisy (differentially private) counts of the rows nearest to each centre, ",
        "floored at 0: not the exact sizes, which nobody is shown."),
      h("div", { class: "plot-holder" }, sizeBars(sizes, `Noisy cluster sizes of the job, ${sizes.length} centres`)),
      loss === null || loss === undefined ? null
        : h("p", { "data-field": "loss" }, "Noisy loss (squared distance to the nearest centre, summed over the rows and divided by the noisy row count): ",
          h("strong", {}, `${num(loss, 4)} ± ${num(se, 3)}`), h("span", { class: "muted" }, " (± one standard error of its noise)")),
    ));
  }
  if (me?.role === "owner") {
    const button = h("button", { type: "button", onclick: async () => {
      button.disabled = true;
      try {
        saveBlob(await fetchBlob(`/v1/jobs/${job.id}/labels`, { signal }), `labels-${shortId(job.id)}.csv`);
      } catch (err) {
        showError(err, "Could not download the labels");
      } finally {
        button.disabled = false;
      }
    } }, "Download labels (CSV)");
    out.push(h("section", { "aria-labelledby": "labels-title", class: "card" },
      h("h2", { id: "labels-title" }, "Labels (owner only)"),
      h("p", { class: "muted" }, "Each row's nearest released centre (0 to k−1), in the dataset's row order: ",
        "computed from the released centres, costs no budget, and only the dataset's owner can fetch it."),
      button));
  }
  return out;
}
