// Sweeps over k: a panel on a dataset's page that prices and starts one (and lists the sweeps
// already run there), and a sweep's own page with its progress, each k's noisy loss with error
// bars, the suggested k, and cancel.

import { api } from "../api.js";
import { fitted } from "../axes.js";
import { field, h, markInvalid, num, shortId, time } from "../dom.js";
import { budgetBar, pct, share } from "../gauges.js";
import { lossChart, lossUnit } from "../plots.js";
import { cancelButton, listAll, notRunnable, pause, POLL_MS, problemText, showError, statusBadge, submitsWork, TERMINAL, warningList } from "../ui.js";

/** "2, 3, 5" -> [2, 3, 5]; a message when the list is not 2 to 32 distinct whole numbers. */
function parseKs(text) {
  const parts = text.split(/[\s,;]+/).filter(Boolean);
  const ks = parts.map(Number);
  if (ks.some((k) => !Number.isInteger(k) || k < 1)) return { error: "List whole numbers of centres, e.g. 2, 3, 4." };
  if (ks.length < 2 || ks.length > 32) return { error: "Give 2 to 32 values of k." };
  if (new Set(ks).size !== ks.length) return { error: "The values of k must be distinct." };
  return { ks: ks.sort((a, b) => a - b) };
}

/** A sweep's suggested k for a list: the k, or that the losses could not tell the ks apart. */
export function suggestion(sw) {
  if (sw.suggested_k !== null && sw.suggested_k !== undefined) return ` · suggested k ${sw.suggested_k}`;
  return sw.status === "succeeded" ? " · no suggested k (the noisy losses cannot tell the ks apart)" : "";
}

/** How a sweep's cost composes: m jobs of μ/√m each make μ, and ε is that μ's, not a sum. */
function compositionText(p, m) {
  return `${m} jobs of μ ${num(p.job_mu)} each compose to μ ${num(p.mu)} (√(${m} × ${num(p.job_mu)}²)), ` +
    `which is ε ${num(p.epsilon)} at δ ${num(p.delta)} for the whole sweep: its jobs' own ε do not add up to it.`;
}

/** Each k's expected accuracy (the estimate gives one per job): the worst column's share. */
function sweepAccuracy(jobs) {
  const known = jobs.filter((j) => Array.isArray(j.accuracy?.centre_std_fraction));
  if (!known.length) return null;
  return h("p", { class: "accuracy", "data-field": "accuracy" }, h("strong", {}, "Expected accuracy: "),
    "each job's centres within about ",
    known.map((j) => `± ${num(Math.max(...j.accuracy.centre_std_fraction) * 100, 2)}% at k = ${j.k}`).join(", "),
    " of a column's declared range (one standard deviation).");
}

/** The dataset page's sweep panel (registered in extensions.js). */
export function sweepPanel(ds, { signal }) {
  const list = h("div", {});
  const section = h("section", { "aria-labelledby": "sweeps-title", class: "card" },
    h("h2", { id: "sweeps-title" }, "Sweeps over k"),
    h("p", { class: "muted" }, "One job per k, each with private summaries, sharing one cost (each job gets μ/√m ",
      "for m values of k); the noisy losses suggest a k."),
    notRunnable(ds, "sweeps") || sweepForm(ds),
    list);
  listAll(`/v1/sweeps?dataset_id=${ds.id}`, signal).then((sweeps) => {
    if (!sweeps.length) return;
    list.replaceChildren(h("h3", {}, "Sweeps on this dataset"),
      h("ul", { "aria-label": "Sweeps on this dataset" }, sweeps.map((s) =>
        h("li", {}, h("a", { href: `#/sweeps/${s.id}` }, `sweep ${shortId(s.id)}`),
          ` · k ${s.ks.join(", ")} · `, statusBadge(s.status), suggestion(s), " · ", time(s.created_at)))));
  }).catch((err) => showError(err, "Could not list the sweeps"));
  return section;
}

function sweepForm(ds) {
  const ks = h("input", { name: "ks", type: "text", value: "2, 3, 4", required: true, spellcheck: "false" });
  const epsilon = h("input", { name: "epsilon", type: "number", step: "any", min: 0, inputmode: "decimal", value: "1" });
  const preview = h("div", { class: "preview", role: "status", "aria-live": "polite", "aria-label": "Price of the sweep" },
    "Enter the values of k and the sweep's ε to see what it would spend.");
  const submit = h("button", { type: "submit", disabled: true }, "Start sweep");
  const form = h("form", { "aria-label": "New sweep", novalidate: true },
    h("div", { class: "row" },
      field("Values of k", ks, "2 to 32 distinct values, separated by commas"),
      field("Epsilon (whole sweep)", epsilon, `at the dataset's δ ${num(ds.budget.delta)}`)),
    preview, submit);

  let generation = 0;
  let timer = null;
  // POST .../sweeps/estimate prices the whole sweep (every k checked against the dataset) and
  // says whether it fits now; it charges nothing.
  async function estimate() {
    const mine = generation; // schedule() moved it on: answers to older bodies are dropped
    submit.disabled = true;
    const parsed = parseKs(ks.value);
    if (parsed.error || !epsilon.value) {
      preview.dataset.admissible = "false";
      preview.replaceChildren(parsed.error || "Enter the sweep's ε.");
      return;
    }
    preview.classList.add("busy");
    try {
      const est = await api(`/v1/datasets/${ds.id}/sweeps/estimate`, { method: "POST",
        json: { ks: parsed.ks, epsilon: Number(epsilon.value) } });
      if (mine !== generation) return;
      markInvalid(form, null);
      const m = est.jobs.length, p = est.privacy;
      preview.replaceChildren(...[
        h("p", {}, h("strong", {}, est.admissible ? "This sweep would cost " : "Over budget: this sweep needs "),
          `ε ${num(p.epsilon)} at δ ${num(p.delta)} · μ ${num(p.mu)} in all: ${m} jobs of about μ ${num(p.job_mu)} each.`),
        h("p", { class: "composition" }, compositionText(p, m), ` It takes ${pct(share(p.mu, est.budget.mu_cap))} of the budget. `,
          budgetBar(est.budget, { job: est.admissible ? p.mu : 0, label: "Budget after this sweep" })),
        est.admissible
          ? h("p", {}, "Budget after it: ", h("strong", {}, `ε ${num(est.budget_after.epsilon_remaining)}`),
            ` of ${num(est.budget_after.epsilon)} left.`)
          : h("p", {}, `Only μ ${num(est.budget.mu_remaining)} (ε ${num(est.budget.epsilon_remaining)}) remains.`),
        sweepAccuracy(est.jobs),
      ].filter(Boolean));
      preview.dataset.admissible = String(est.admissible);
      submit.disabled = !est.admissible;
    } catch (err) {
      if (mine !== generation) return;
      preview.dataset.admissible = "false";
      preview.replaceChildren(h("p", { class: "error" }, problemText(err)));
      markInvalid(form, err.field);
    } finally {
      if (mine === generation) preview.classList.remove("busy");
    }
  }
  const schedule = () => {
    clearTimeout(timer);
    generation++;
    submit.disabled = true;
    timer = setTimeout(estimate, 250);
  };
  form.addEventListener("input", schedule);

  submitsWork(form, submit, {
    path: `/v1/datasets/${ds.id}/sweeps`,
    body: () => {
      const parsed = parseKs(ks.value);
      return parsed.error ? null : { ks: parsed.ks, epsilon: Number(epsilon.value) };
    },
    page: (sweep) => `#/sweeps/${sweep.id}`,
    failure: "The sweep was not started",
    refused: schedule,
  });
  generation++;
  setTimeout(estimate, 0);
  return form;
}

/** One sweep: progress, the loss against k with error bars, the suggested k, its jobs, cancel. */
export async function sweepView(main, { params: [id], signal }) {
  let sweep = await api(`/v1/sweeps/${id}`, { signal });
  const ds = await api(`/v1/datasets/${sweep.dataset_id}`, { signal }).catch(() => null);
  const body = h("div", {});
  main.replaceChildren(
    h("p", { class: "crumbs" }, h("a", { href: "#/sweeps" }, "Sweeps"), " / ",
      ds ? h("a", { href: `#/datasets/${ds.id}` }, ds.name) : null),
    h("h1", {}, `Sweep ${shortId(sweep.id)}`),
    body,
  );
  const draw = (sw) => body.replaceChildren(...sweepDetails(sw, ds, signal, draw).filter(Boolean));
  draw(sweep);
  while (!TERMINAL.has(sweep.status)) {
    try {
      await pause(POLL_MS, signal);
      sweep = await api(`/v1/sweeps/${id}`, { signal });
      draw(sweep);
    } catch (err) {
      if (err.name === "AbortError") return;
      if (err.status === 401) {
        window.dispatchEvent(new CustomEvent("privclust:unauthorized", { detail: err }));
        return;
      }
      showError(err, "Could not refresh the sweep");
      if (err.status === 404) return;
    }
  }
}

function suggestedCell(sw) {
  if (sw.suggested_k !== null && sw.suggested_k !== undefined) {
    return h("strong", { "data-field": "suggested_k" }, String(sw.suggested_k));
  }
  if (sw.status !== "succeeded") return h("span", { class: "muted" }, "once every job has succeeded");
  return h("span", { "data-field": "suggested_k" }, "none: the noisy losses cannot tell these values of k apart",
    sw.warnings?.length ? " (see the warning below)" : "");
}

function sweepDetails(sw, ds, signal, draw) {
  const total = Math.max(1, sw.progress.iterations || 0);
  const done = sw.status === "succeeded" ? total : Math.min(sw.progress.iteration, total);
  const bar = h("progress", { max: total, value: done, class: `progress status-${sw.status}`,
    "aria-label": `Progress of sweep ${shortId(sw.id)}` });
  bar.value = done;
  const p = sw.privacy;
  const rows = [
    ["Status", statusBadge(sw.status)],
    ["Progress", h("span", { class: "progress-cell" }, bar, h("span", { class: "progress-text" }, `${done}/${total}`))],
    ["Values of k", sw.ks.join(", ")],
    ["Cost", h("span", {}, `ε ${num(p.epsilon)} at δ ${num(p.delta)} · μ ${num(p.mu)} in all; μ ${num(p.job_mu)} per job`,
      h("span", { class: "muted composition" }, " · ", compositionText(p, sw.ks.length),
        ds ? ` It took ${pct(share(p.mu, ds.budget.mu_cap))} of the dataset's budget.` : ""))],
    ["Suggested k", suggestedCell(sw)],
    ["Created", time(sw.created_at)],
  ];
  const cancel = TERMINAL.has(sw.status) ? null
    : cancelButton(`/v1/sweeps/${sw.id}/cancel`, "Cancel sweep (queued jobs refunded)", "Could not cancel the sweep", { draw, signal });
  const title = `Noisy loss against k for sweep ${shortId(sw.id)}`;
  const suggested = (k) => sw.suggested_k !== null && sw.suggested_k !== undefined && k === sw.suggested_k;
  return [
    h("dl", { class: "meta", "aria-label": "Sweep" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    warningList(sw.warnings),
    cancel,
    h("section", { "aria-labelledby": "loss-title", class: "card" },
      h("h2", { id: "loss-title" }, "Loss against k"),
      h("p", { class: "muted" }, "Each job's noisy loss with ± one standard error of its noise (error bars that ",
        "overlap cannot be told apart); ",
        sw.suggested_k !== null && sw.suggested_k !== undefined
          ? "the suggested k (the elbow of the noisy losses) is drawn larger and in green."
          : sw.status === "succeeded" ? "no k is suggested, so none is marked."
            : "a suggested k is marked once every job has succeeded."),
      fitted(h("div", { class: "plot-holder" }), (width) =>
        lossChart(sw.jobs, sw.suggested_k, title, { width, scaled: sw.loss_space === "scaled" })),
      h("p", { class: "muted small" }, `Losses in ${lossUnit(sw.loss_space)}.`)),
    h("div", { class: "scroll" }, h("table", { "aria-label": "Jobs of the sweep" },
      h("thead", {}, h("tr", {}, ["k", "Job", "Status", "Loss (noisy)", "± SE"].map((n) => h("th", { scope: "col" }, n)))),
      h("tbody", {}, sw.jobs.map((j) => h("tr", { class: suggested(j.k) ? "suggested" : null, dataset: { k: String(j.k) } },
        h("td", { class: "num" }, String(j.k), suggested(j.k) ? " (suggested)" : ""),
        h("td", {}, h("a", { href: `#/jobs/${j.job_id}` }, `job ${shortId(j.job_id)}`)),
        h("td", {}, statusBadge(j.status)),
        h("td", { class: "num" }, num(j.loss, 4)),
        h("td", { class: "num" }, num(j.loss_se, 3))))))),
  ];
}
