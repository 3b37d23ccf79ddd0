// One job: status, live progress, privacy cost and, once it succeeded, a picture of its private
// centres (the released centres only: the console never has a data row to draw).

import { api, fetchBlob, saveBlob } from "../api.js";
import { fitted } from "../axes.js";
import { domainRanges, legend, parallel, scatter } from "../centres.js";
import { field, h, num, richText, shortId, time } from "../dom.js";
import { pct, progress, share } from "../gauges.js";
import { lossUnit, sizeBars } from "../plots.js";
import { cancelButton, cost, follow, showError, statusBadge, TERMINAL, warningList } from "../ui.js";

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
    summary.replaceChildren(details(j, ds, signal, draw));
    if (j.status === "succeeded" && j.result) {
      if (!picture.dataset.drawn) {
        centresPicture(picture, j.result, j.k, ds);
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

/** The job's cost, and what it took of its dataset's budget on the budget's one scale. */
function costLine(job, ds) {
  const p = job.privacy;
  const muCap = ds?.budget?.mu_cap;
  return h("span", {}, `${cost(p)} · σ ${num(p.sigma)} · ${p.iterations} releases`,
    muCap ? h("span", { class: "muted composition" },
      ` · ${pct(share(p.mu, muCap))} of the dataset's budget, (μ ${num(p.mu)} / μ cap ${num(muCap)})²: `,
      "costs add in squares, so the shares of all its jobs add up; their ε do not.") : null);
}

function details(job, ds, signal, draw) {
  const rows = [
    ["Status", statusBadge(job.status)],
    ["Progress", progress(job)],
    ["Algorithm", job.algorithm],
    ["k", String(job.k)],
    ["Cost", costLine(job, ds)],
    ["Private summaries", job.summaries
      ? `yes: μ ${num(job.privacy.summary_mu)} of the job's μ ${num(job.privacy.mu)} (noisy sizes and loss)` : "no"],
    job.sweep_id ? ["Sweep", h("a", { href: `#/sweeps/${job.sweep_id}` }, `sweep ${shortId(job.sweep_id)}`)] : null,
    job.members ? ["Members", memberStates(job.members, ds)] : null,
    ["Created", time(job.created_at)],
    ["Started", time(job.started_at)],
    ["Finished", time(job.finished_at)],
  ].filter(Boolean);
  if (job.error) rows.push(["Error", h("span", { class: "error" }, richText(job.error))]);
  const cancel = !TERMINAL.has(job.status) && !job.cancel_requested
    ? cancelButton(`/v1/jobs/${job.id}/cancel`, job.status === "queued" ? "Cancel (refunded)" : "Stop (stays charged)",
      "Could not cancel the job", { draw, signal })
    : null;
  return h("div", {},
    h("dl", { class: "meta", "aria-label": "Job" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    job.cancel_requested && !TERMINAL.has(job.status) ? h("p", { class: "muted" }, "Cancellation requested.") : null,
    cancel);
}

const MEMBER_STATUS = {
  pending: () => "not asked yet",
  joined: () => "joined (charged the job on its own ledger)",
  answered: (n) => `answered ${n} release${n === 1 ? "" : "s"}`,
  finished: (n) => `finished after ${n} release${n === 1 ? "" : "s"}`,
  refused: () => "refused to join (nothing charged)",
  failed: (n) => `failed after ${n} release${n === 1 ? "" : "s"}`,
};

/** A federated job's members in public order: each one's status and the releases it answered
 * (public facts only: never a statistic or a count of its rows). */
function memberStates(members, ds) {
  return h("ol", { "aria-label": "Members' status" }, members.map((m) => {
    const where = ds?.members?.[m.position]?.url;
    const say = MEMBER_STATUS[m.status] ?? (() => m.status);
    return h("li", { "data-status": m.status },
      where ? `${where}: ` : `member ${m.position + 1}: `, say(m.releases));
  }));
}

/** Scatter over two chosen columns, or parallel coordinates (the default when d > 2). */
function centresPicture(section, result, k, ds) {
  section.dataset.drawn = "true";
  const { centers, columns } = result;
  const errors = result.accuracy?.centre_error ?? null;
  const d = columns.length;
  const options = (selected) => columns.map((c, i) => h("option", { value: String(i), selected: i === selected }, c));
  const kind = h("select", { name: "kind" },
    h("option", { value: "scatter" }, "Scatter of two columns"),
    d > 1 ? h("option", { value: "parallel", selected: d > 2 }, "Parallel coordinates") : null);
  const xCol = h("select", { name: "x" }, options(0));
  const yCol = h("select", { name: "y" }, options(Math.min(1, d - 1)));
  const axes = h("div", { class: "row" }, field("Horizontal axis", xCol), field("Vertical axis", yCol));
  const holder = h("div", { class: "plot-holder" });
  const ranges = domainRanges(ds, d);
  const note = h("p", { class: "muted small" });
  const redraw = () => {
    const parallelView = kind.value === "parallel";
    axes.hidden = parallelView;
    const title = parallelView
      ? `Centres of the job: parallel coordinates over ${d} columns`
      : `Centres of the job: ${columns[xCol.value]} against ${columns[yCol.value]}`;
    note.textContent = ranges ? "Each axis spans its column's declared domain." : "Each axis spans the centres' own range.";
    fitted(holder, (width) => (parallelView
      ? parallel(centers, columns, title, ranges, width, errors)
      : scatter(centers, columns, Number(xCol.value), Number(yCol.value), title, width, errors, ranges)));
  };
  for (const control of [kind, xCol, yCol]) control.addEventListener("change", redraw);
  section.replaceChildren(
    h("h2", { id: "centres-title" }, "Centres"),
    h("p", { class: "muted" }, `${k} differentially private centres, in the data's original coordinates.`,
      errors ? " The bars span each centre's expected error: about 9 times in 10 a non-private k-means puts that centre within them (noise and segmentation together)." : ""),
    h("div", { class: "row" }, field("Picture", kind)),
    axes,
    holder,
    note,
    legend(centers.length),
    h("details", {}, h("summary", {}, "Centres as numbers"), centresTable(centers, columns, errors)),
    ...(result.category_shares ? [shareTable(result.category_shares)] : []),
  );
  redraw();
}

/** Each centre's share of each category: its one-hot coordinates, clipped and renormalised. */
function shareTable(shares) {
  const heads = Object.entries(shares[0]).flatMap(([col, cats]) => Object.keys(cats).map((cat) => [col, cat]));
  return h("div", { class: "scroll" }, h("table", { "aria-label": "Category shares" },
    h("caption", {}, "Category shares per centre (post-processing of the released centres)"),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "#"), heads.map(([c, v]) => h("th", { scope: "col" }, `${c}=${v}`)))),
    h("tbody", {}, shares.map((s, i) => h("tr", {}, h("th", { scope: "row" }, String(i + 1)),
      heads.map(([c, v]) => h("td", { class: "num" }, num(s[c][v], 3))))))));
}

function centresTable(centers, columns, errors) {
  const band = errors ? h("tr", { class: "muted" }, h("th", { scope: "row" }, "±"),
    errors.map((e) => h("td", { class: "num" }, num(e, 2)))) : null;
  return h("div", { class: "scroll" }, h("table", { "aria-label": "Centres" },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "#"), columns.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, centers.map((c, i) => h("tr", {}, h("th", { scope: "row" }, String(i + 1)),
      c.map((v, j) => h("td", { class: "num" }, errors ? withinError(v, errors[j]) : num(v, 4))))), band)));
}

/** A centre's coordinate to the digits its error supports: one digit finer than the band's first. */
function withinError(v, e) {
  if (!(e > 0)) return num(v, 4);
  const exponent = Math.floor(Math.log10(e)) - 1;
  return exponent >= 0 ? String(Math.round(v / 10 ** exponent) * 10 ** exponent) : v.toFixed(-exponent);
}

/**
 * A succeeded job's private summaries (noisy sizes as bars, the noisy loss with its standard
 * error) and, for the dataset's owner, the labels download. Both come from the API as they are:
 * the sizes and loss are DP releases, the labels post-processing of the released centres.
 */
function summaryCards(job, me, signal) {
  const out = [];
  const { sizes, loss, loss_se: se } = job.result;
  const warnings = warningList(job.result.warnings);
  if (sizes) {
    const sizeSe = job.result.sizes_se ?? null;
    out.push(h("section", { "aria-labelledby": "sizes-title", class: "card" },
      h("h2", { id: "sizes-title" }, "Private summaries"),
      warnings,
      h("p", { class: "muted" }, "Noisy (differentially private) counts of the rows nearest to each centre, ",
        "floored at 0: not the exact sizes, which nobody is shown.",
        sizeSe ? " Each bar has ± one standard deviation of its noise." : ""),
      fitted(h("div", { class: "plot-holder" }), (width) =>
        sizeBars(sizes, `Noisy cluster sizes of the job, ${sizes.length} centres`, { se: sizeSe, width })),
      loss === null || loss === undefined ? null
        : h("p", { "data-field": "loss" }, "Noisy loss (squared distance to the nearest centre, summed over the rows and divided by the noisy row count",
          lossSpace(job.result), "): ",
          h("strong", {}, `${num(loss, 4)} ± ${num(se, 3)}`), h("span", { class: "muted" }, " (± one standard error of its noise)")),
    ));
  } else if (warnings) {
    out.push(h("section", { class: "card", "aria-label": "Warnings" }, warnings));
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

function lossSpace(result) {
  return `, in ${lossUnit(result.loss_space)}`;
}
