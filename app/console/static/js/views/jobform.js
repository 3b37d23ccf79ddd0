// The job form on a dataset's page. Every change is priced by POST .../jobs/estimate (which
// charges nothing): the cost, what it takes of the budget on the budget's one scale, the budget
// after it, and the accuracy to expect. The cost is given as ε, as μ, or as a target accuracy,
// for which the estimate finds the smallest ε that meets it. Submit only when admissible.

import { api, apiSchema } from "../api.js";
import { field, h, markInvalid, num, richText, seconds } from "../dom.js";
import { budgetBar, pct, share } from "../gauges.js";
import { keyPriceLines } from "../limits.js";
import { cost, problemText, submitsWork } from "../ui.js";

const MODES = [
  ["epsilon", "ε (epsilon)"],
  ["mu", "μ (Gaussian DP)"],
  ["target", "a target accuracy"],
];

function numberInput(name, attrs = {}) {
  return h("input", { name, type: "number", step: "any", inputmode: "decimal", ...attrs });
}

/** How long the job would run once a worker starts it (the estimate's `duration`). */
export function durationLine(duration) {
  if (!duration) return null;
  const where = duration.engine === "dask" ? " on the Dask cluster" : "";
  return h("p", { class: "duration", "data-field": "duration" }, h("strong", {}, "Expected run time: "),
    `about ${seconds(duration.seconds)}${where} (${seconds(duration.low)} to ${seconds(duration.high)}), `,
    "once a worker starts it; the wait in the queue comes on top.");
}

/**
 * What the estimate says about accuracy: each column's expected centre error in its own
 * units and as a share of its declared range, and the loss's standard error with summaries.
 * Null when the estimate has none.
 */
export function accuracyLines(accuracy, columns) {
  if (!accuracy || !Array.isArray(accuracy.centre_std)) return null;
  const worst = Math.max(...(accuracy.centre_std_fraction || [0]));
  const perColumn = accuracy.centre_std.map((sd, j) => {
    const fraction = accuracy.centre_std_fraction?.[j];
    return `${columns[j] ?? `column ${j + 1}`} ± ${num(sd, 2)}${fraction !== undefined ? ` (${num(fraction * 100, 2)}%)` : ""}`;
  });
  return h("div", { class: "accuracy", "data-field": "accuracy" },
    h("p", {}, h("strong", {}, "Expected accuracy: "),
      `each released centre within about ± ${num(worst * 100, 2)}% of a column's declared range `,
      "of its cluster's exact centre (one standard deviation, for a cluster of n_rows_dp / k rows)."),
    h("p", { class: "small" }, perColumn.join("; ")),
    accuracy.loss_se !== null && accuracy.loss_se !== undefined
      ? h("p", { class: "small" }, `The private loss would come with a standard error of about ${num(accuracy.loss_se, 2)}`,
        accuracy.loss_space === "scaled" ? " (in the scaled space)" : "",
        accuracy.sizes_se ? `, each private cluster size with ± ${num(accuracy.sizes_se, 2)} rows.` : ".")
      : null);
}

export function jobForm(ds, budget) {
  // The API's default until describeAlgorithms fills in every name from the API's own schema
  // (the names are written once, in the library's Algorithm enum).
  const algorithm = h("select", { name: "algorithm" }, h("option", { value: "auto" }, "auto"));
  const algorithmHint = h("small", { class: "hint" }, "");
  const k = numberInput("k", { min: 1, step: 1, value: String(Math.max(1, Math.min(3, ds.n_rows_dp))), required: true });
  const modes = MODES.map(([value, label], i) =>
    h("label", { class: "check inline-choice" }, h("input", { type: "radio", name: "cost_mode", value, checked: i === 0 }), ` ${label}`));
  const summaries = h("input", { type: "checkbox", name: "summaries" });
  const epsilon = numberInput("epsilon", { min: 0, value: String(num(Math.min(1, budget.epsilon_remaining || 1))) });
  const mu = numberInput("mu", { min: 0 });
  const target = numberInput("target", { min: 0, max: 100, value: "2" });
  const delta = numberInput("delta", { min: 0, max: 1, placeholder: num(ds.budget.delta) });
  const iterations = numberInput("params.iterations", { min: 1, max: 1000, step: 1, placeholder: "default" });
  const variations = numberInput("params.variations", { min: 1, max: 1000, step: 1, placeholder: "default" });
  const projection = numberInput("params.projection_dim", { min: 1, max: 1000, step: 1, placeholder: "default" });
  const preview = h("div", { class: "preview", role: "status", "aria-live": "polite", "aria-label": "Cost preview" },
    "Enter k and a cost to see what the job would spend.");
  const submit = h("button", { type: "submit", disabled: true }, "Submit job");
  const inputs = {
    epsilon: field("Epsilon (this job)", epsilon),
    mu: field("Mu (this job)", mu),
    target: field("Target accuracy (% of each column's range)", target,
      "the centres' expected error, one standard deviation; the estimate finds the smallest ε that meets it"),
  };
  const deltaField = field("Delta (this job)", delta, `default: the dataset's δ ${num(ds.budget.delta)}`);
  const form = h("form", { class: "job-form", "aria-label": "New job", novalidate: true },
    h("div", { class: "row" }, h("div", { class: "field wide" }, h("label", { class: "label", for: "job-algorithm" }, "Algorithm"),
      algorithm, algorithmHint), field("k (number of centres)", k)),
    h("fieldset", { class: "row" }, h("legend", {}, "Give the cost as"), modes),
    h("div", { class: "row" }, inputs.epsilon, inputs.mu, inputs.target, deltaField),
    h("label", { class: "check" }, summaries,
      " Private summaries: also release noisy cluster sizes and a noisy loss (paid out of this job's cost)"),
    h("details", {}, h("summary", {}, "Advanced parameters"),
      h("div", { class: "row" },
        field("Iterations", iterations), field("Variations", variations), field("Projection dimension", projection))),
    preview,
    submit,
  );
  algorithm.id = "job-algorithm";
  algorithmHint.id = "job-algorithm-hint";
  algorithm.setAttribute("aria-describedby", algorithmHint.id);
  describeAlgorithms(algorithm, algorithmHint);

  const mode = () => form.elements.cost_mode.value;
  function showMode() {
    for (const [name, wrapper] of Object.entries(inputs)) {
      wrapper.hidden = name !== mode();
      wrapper.querySelector("input").disabled = name !== mode();
    }
    deltaField.hidden = mode() === "mu"; // a cost in mu needs no delta
    delta.disabled = mode() === "mu";
  }
  showMode();

  let estimated = null; // the last admissible estimate (its ε is what a target-driven job runs at)
  function body({ forSubmit = false } = {}) {
    const out = { algorithm: algorithm.value, k: Number(k.value) };
    if (mode() === "mu") out.mu = Number(mu.value);
    else if (mode() === "epsilon") out.epsilon = Number(epsilon.value);
    else if (forSubmit) out.epsilon = estimated?.privacy.epsilon;
    else out.target_centre_std_fraction = Number(target.value) / 100;
    if (delta.value && mode() !== "mu") out.delta = Number(delta.value);
    if (summaries.checked) out.summaries = true;
    const params = {};
    for (const [name, input] of [["iterations", iterations], ["variations", variations], ["projection_dim", projection]]) {
      if (input.value) params[name] = Number(input.value);
    }
    if (Object.keys(params).length) out.params = params;
    return out;
  }

  function incomplete() {
    if (!k.value) return "Enter k.";
    const input = { epsilon, mu, target }[mode()];
    if (!input.value) return mode() === "target" ? "Enter the accuracy to aim for." : `Enter this job's ${mode() === "mu" ? "μ" : "ε"}.`;
    return null;
  }

  function describe(est, targetText) {
    const p = est.privacy, after = est.budget_after;
    const jobShare = share(p.mu, est.budget.mu_cap);
    return [
      h("p", {}, h("strong", {}, est.admissible ? "This job would cost " : "Over budget: this job needs "),
        cost(p), ` (${est.algorithm}, σ ${num(p.sigma)} per release, ${p.iterations} release${p.iterations === 1 ? "" : "s"}).`),
      mode() === "target" ? h("p", {}, `The smallest ε that meets ± ${num(Number(targetText), 3)}% is ε ${num(p.epsilon)}.`) : null,
      h("p", { class: "composition" }, `It takes ${pct(jobShare)} of the budget: (μ ${num(p.mu)} / μ cap ${num(est.budget.mu_cap)})², `,
        "since costs add in squares. ", budgetBar(est.budget, { job: est.admissible ? p.mu : 0, label: "Budget after this job" }),
        h("span", { class: "small" }, " (green: left after it; striped: this job; amber: reserved; grey: spent)")),
      p.summary_mu ? h("p", {}, `Of it, μ ${num(p.summary_mu)} goes to the private summaries; the centres get the rest.`) : null,
      est.protects ? h("p", { class: "protects" }, `What this μ protects: ${est.protects}.`) : null,
      est.admissible
        ? h("p", {}, "Budget after it: ", h("strong", {}, `ε ${num(after.epsilon_remaining)}`),
          ` of ${num(after.epsilon)} left (μ ${num(after.mu_remaining)} of ${num(after.mu_cap)}; ε does not add up job by job).`)
        : h("p", {}, `Only μ ${num(est.budget.mu_remaining)} (ε ${num(est.budget.epsilon_remaining)}) remains.`),
      ...keyPriceLines(est),
      accuracyLines(est.accuracy, ds.columns),
      durationLine(est.duration),
    ].filter(Boolean);
  }

  let generation = 0;
  let timer = null;
  let priced = null; // the body the preview shows; a change event that alters nothing keeps it
  async function estimate() {
    const mine = generation; // schedule() moved it on: answers to older bodies are dropped
    submit.disabled = true;
    estimated = null;
    priced = JSON.stringify(body());
    const targetText = target.value;
    const missing = incomplete();
    if (missing) {
      preview.replaceChildren(missing);
      return;
    }
    preview.classList.add("busy");
    try {
      const est = await api(`/v1/datasets/${ds.id}/jobs/estimate`, { method: "POST", json: body() });
      if (mine !== generation) return;
      markInvalid(form, null);
      preview.replaceChildren(...describe(est, targetText));
      preview.dataset.admissible = String(est.admissible);
      estimated = est.admissible ? est : null;
      submit.disabled = !est.admissible;
      submit.textContent = mode() === "target" && est.admissible ? `Submit job at ε ${num(est.privacy.epsilon)}` : "Submit job";
    } catch (err) {
      if (mine !== generation) return;
      preview.dataset.admissible = "false";
      preview.replaceChildren(h("p", { class: "error" }, problemText(err)));
      markInvalid(form, err.field === "target_centre_std_fraction" ? "target" : err.field);
    } finally {
      if (mine === generation) preview.classList.remove("busy");
    }
  }
  function schedule() {
    // Blurring a field fires `change` without changing anything: leave the button alone then,
    // or the click that blurred the field would land on a button just disabled.
    if (JSON.stringify(body()) === priced) return;
    clearTimeout(timer);
    generation++;
    submit.disabled = true;
    timer = setTimeout(estimate, 250);
  }
  form.addEventListener("input", schedule);
  form.addEventListener("change", (event) => {
    if (event.target.name === "cost_mode") showMode();
    schedule();
  });

  submitsWork(form, submit, {
    path: `/v1/datasets/${ds.id}/jobs`,
    body: () => body({ forSubmit: true }),
    page: (job) => `#/jobs/${job.id}`,
    failure: "The job was not submitted",
    sending: "Submitting…",
    refused: () => {
      submit.textContent = "Submit job";
      priced = null;
      schedule();
    },
  });
  generation++;
  setTimeout(estimate, 0);
  return form;
}

/** The algorithms and the description of each, as the API's own schema states them. */
async function describeAlgorithms(select, hint) {
  const schema = await apiSchema("JobCreate");
  const property = schema?.properties?.algorithm;
  const names = property?.enum;
  if (Array.isArray(names) && names.length) {
    const chosen = select.value;
    select.replaceChildren(...names.map((a) => h("option", { value: a, selected: a === chosen }, a)));
  }
  hint.replaceChildren(...richText(property?.description || ""));
}
