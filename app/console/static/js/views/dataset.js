// One dataset: its public metadata, its budget as gauges with the ledger as a timeline, its jobs,
// and a form that prices a job (the estimate endpoint) before submitting it.

import { api, idempotencyKey } from "../api.js";
import { gauge } from "../charts.js";
import { field, h, markInvalid, num, shortId, time } from "../dom.js";
import { datasetPanels } from "../extensions.js";
import { clearError, cost, emptyState, listAll, liveJobsTable, showError } from "../ui.js";

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
  const panels = datasetPanels.map((panel) => panel(ds, { signal, me })).filter(Boolean);
  const budgetBox = h("div", {}, budgetGauges(budget));
  const ledgerBox = h("div", {}, timeline(ledger.entries));
  // A job that ends moves the budget (a refund) and the ledger: show them as they are now.
  const onFinish = async () => {
    try {
      const [b, l] = await Promise.all([
        api(`/v1/datasets/${id}/budget`, { signal }),
        api(`/v1/datasets/${id}/ledger`, { signal }),
      ]);
      budgetBox.replaceChildren(budgetGauges(b));
      ledgerBox.replaceChildren(timeline(l.entries));
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
    h("section", { "aria-labelledby": "new-job-title", class: "card" },
      h("h2", { id: "new-job-title" }, "New job"),
      ds.deleted_at
        ? h("p", { class: "muted" }, "The rows of this dataset were deleted: no new jobs can run on it.")
        : jobForm(ds, budget)),
    h("section", { "aria-labelledby": "jobs-title" },
      h("h2", { id: "jobs-title" }, "Jobs on this dataset"),
      jobs.length
        ? h("div", { class: "scroll" }, liveJobsTable(jobs, { signal, label: `Jobs on ${ds.name}`, onFinish }))
        : emptyState("No jobs yet.", h("p", {}, "Price one with the form above, then submit it."))),
    ...panels,
  );
}

function metadata(ds) {
  const rows = [
    ["Columns (d)", `${ds.n_cols}: ${ds.columns.join(", ")}`],
    ["Rows (noisy, n_rows_dp)", `${ds.n_rows_dp}${ds.count_public ? " (declared public: exact)" : ""}`],
    ds.n_rows === null || ds.n_rows === undefined ? null : ["Exact rows (owner only)", String(ds.n_rows)],
    ["Neighbouring relation", ds.relation],
    ["Cost of the row count", ds.count_mu === null ? "none (declared public)" : `μ ${num(ds.count_mu)}`],
    ["Declared domain", `ball of radius ${num(ds.domain.radius)} around (${ds.domain.center.map((c) => num(c)).join(", ")})`],
    ["Created", time(ds.created_at)],
    ["Rows deleted", ds.deleted_at ? time(ds.deleted_at) : "no"],
  ].filter(Boolean);
  return h("div", {},
    h("dl", { class: "meta", "aria-label": "Dataset" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    ds.warnings.length ? h("ul", { class: "warnings", "aria-label": "Warnings" }, ds.warnings.map((w) => h("li", {}, w))) : null,
  );
}

/** The budget in epsilon (at the dataset's delta) and in mu, whose costs add in squares. */
export function budgetGauges(b) {
  const sq = (x) => (b.mu_cap > 0 ? (x * x) / (b.mu_cap * b.mu_cap) : 0);
  return h("div", { class: "gauges" },
    gauge({
      label: "Epsilon remaining",
      value: b.epsilon_remaining,
      max: b.epsilon,
      valueText: `ε ${num(b.epsilon_remaining)}`,
      segments: [{ fraction: b.epsilon > 0 ? 1 - b.epsilon_remaining / b.epsilon : 1, kind: "spent" }],
      caption: `of ε ${num(b.epsilon)} at δ ${num(b.delta)}`,
    }),
    gauge({
      label: "Mu remaining",
      value: b.mu_remaining,
      max: b.mu_cap,
      valueText: `μ ${num(b.mu_remaining)}`,
      segments: [{ fraction: sq(b.mu_spent), kind: "spent" }, { fraction: sq(b.mu_reserved), kind: "reserved" }],
      caption: `of μ ${num(b.mu_cap)}: spent ${num(b.mu_spent)}, reserved ${num(b.mu_reserved)} (GDP costs add in squares)`,
    }),
    h("p", { class: "muted small" }, `${b.jobs} job${b.jobs === 1 ? "" : "s"} charged to this budget.`),
  );
}

function timeline(entries) {
  if (!entries.length) return emptyState("The ledger is empty.");
  return h("ol", { class: "timeline", "aria-label": "Ledger entries, oldest first" },
    entries.map((e) => h("li", { class: `kind-${e.kind}` },
      h("span", { class: "dot", "aria-hidden": "true" }),
      h("div", {},
        h("strong", {}, KINDS[e.kind] || e.kind),
        e.job_id ? [" · ", h("a", { href: `#/jobs/${e.job_id}` }, `job ${shortId(e.job_id)}`)] : null,
        h("div", { class: "small" },
          time(e.created_at),
          e.mu !== null ? ` · μ ${num(e.mu)}` : "",
          e.epsilon !== null ? ` · ε ${num(e.epsilon)}` : "",
          e.sigma !== null ? ` · σ ${num(e.sigma)}` : "",
          e.iterations ? ` · ${e.iterations} release${e.iterations === 1 ? "" : "s"}` : ""),
        e.note ? h("div", { class: "small muted" }, e.note) : null),
    )));
}

function numberInput(name, attrs = {}) {
  return h("input", { name, type: "number", step: "any", inputmode: "decimal", ...attrs });
}

/** The job form: every change is priced by POST .../jobs/estimate; submit only when admissible. */
function jobForm(ds, budget) {
  const algorithm = h("select", { name: "algorithm" },
    ["auto", "pe-means", "hdpe-means", "fastlloyd", "lsh-coreset"].map((a) => h("option", { value: a }, a)));
  const k = numberInput("k", { min: 1, step: 1, value: String(Math.max(1, Math.min(3, ds.n_rows_dp))), required: true });
  const useMu = h("input", { type: "checkbox", name: "use_mu" });
  const summaries = h("input", { type: "checkbox", name: "summaries" });
  const epsilon = numberInput("epsilon", { min: 0, value: String(num(Math.min(1, budget.epsilon_remaining || 1))) });
  const mu = numberInput("mu", { min: 0, disabled: true });
  const delta = numberInput("delta", { min: 0, max: 1, placeholder: num(ds.budget.delta) });
  const iterations = numberInput("params.iterations", { min: 1, max: 1000, step: 1, placeholder: "default" });
  const variations = numberInput("params.variations", { min: 1, max: 1000, step: 1, placeholder: "default" });
  const projection = numberInput("params.projection_dim", { min: 1, max: 1000, step: 1, placeholder: "default" });
  const preview = h("div", { class: "preview", role: "status", "aria-live": "polite", "aria-label": "Cost preview" },
    "Enter k and a cost to see what the job would spend.");
  const submit = h("button", { type: "submit", disabled: true }, "Submit job");
  const epsilonField = field("Epsilon (this job)", epsilon);
  const muField = field("Mu (this job)", mu);
  muField.hidden = true;
  const form = h("form", { class: "job-form", "aria-label": "New job", novalidate: true },
    h("div", { class: "row" },
      field("Algorithm", algorithm, "auto: pe-lloyd, or HDPE-means when d > 32 and μ > 0.4"),
      field("k (number of centres)", k),
      epsilonField, muField,
      field("Delta (this job)", delta, `default: the dataset's δ ${num(ds.budget.delta)}`)),
    h("label", { class: "check" }, useMu, " Give the cost as μ (Gaussian DP) instead of ε"),
    h("label", { class: "check" }, summaries,
      " Private summaries: also release noisy cluster sizes and a noisy loss (paid out of this job's cost)"),
    h("details", {}, h("summary", {}, "Advanced parameters"),
      h("div", { class: "row" },
        field("Iterations", iterations), field("Variations", variations), field("Projection dimension", projection))),
    preview,
    submit,
  );

  function body() {
    const out = { algorithm: algorithm.value, k: Number(k.value) };
    if (useMu.checked) out.mu = Number(mu.value);
    else out.epsilon = Number(epsilon.value);
    if (delta.value && !useMu.checked) out.delta = Number(delta.value);
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
    if (useMu.checked ? !mu.value : !epsilon.value) return `Enter this job's ${useMu.checked ? "μ" : "ε"}.`;
    return null;
  }

  let generation = 0;
  let timer = null;
  let priced = null; // the body the preview shows; a change event that alters nothing keeps it
  async function estimate() {
    const mine = ++generation;
    submit.disabled = true;
    priced = JSON.stringify(body());
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
      const after = est.budget_after;
      const lines = [
        h("p", {}, h("strong", {}, est.admissible ? "This job would cost " : "Over budget: this job needs "),
          cost(est.privacy), ` (${est.algorithm}, σ ${num(est.privacy.sigma)} per release, `,
          `${est.privacy.iterations} release${est.privacy.iterations === 1 ? "" : "s"}).`),
        est.privacy.summary_mu
          ? h("p", {}, `Of it, μ ${num(est.privacy.summary_mu)} goes to the private summaries; the centres get the rest.`)
          : null,
        est.admissible
          ? h("p", {}, "Budget after it: ", h("strong", {}, `ε ${num(after.epsilon_remaining)}`),
            ` of ${num(after.epsilon)} left (μ ${num(after.mu_remaining)} of ${num(after.mu_cap)}).`)
          : h("p", {}, `Only μ ${num(est.budget.mu_remaining)} (ε ${num(est.budget.epsilon_remaining)}) remains.`),
      ];
      preview.replaceChildren(...lines.filter(Boolean));
      preview.dataset.admissible = String(est.admissible);
      submit.disabled = !est.admissible;
    } catch (err) {
      if (mine !== generation) return;
      preview.dataset.admissible = "false";
      preview.replaceChildren(h("p", { class: "error" }, err.problem?.detail || err.message));
      markInvalid(form, err.field);
    } finally {
      if (mine === generation) preview.classList.remove("busy");
    }
  }
  function schedule() {
    // Blurring a field fires `change` without changing anything: leave the button alone then,
    // or the click that blurred the field would land on a button just disabled.
    if (JSON.stringify(body()) === priced) return;
    clearTimeout(timer);
    submit.disabled = true;
    timer = setTimeout(estimate, 250);
  }
  form.addEventListener("input", schedule);
  form.addEventListener("change", schedule);
  useMu.addEventListener("change", () => {
    epsilonField.hidden = useMu.checked;
    epsilon.disabled = useMu.checked;
    muField.hidden = !useMu.checked;
    mu.disabled = !useMu.checked;
    delta.disabled = useMu.checked; // a cost in mu needs no delta
  });

  let pending = null; // {body, key}: a submission that got no answer is retried with its key
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const json = body();
    const text = JSON.stringify(json);
    const key = pending && pending.body === text ? pending.key : idempotencyKey();
    pending = { body: text, key };
    submit.disabled = true;
    submit.textContent = "Submitting…";
    try {
      const job = await api(`/v1/datasets/${ds.id}/jobs`, { method: "POST", json, headers: { "Idempotency-Key": key } });
      pending = null;
      clearError();
      location.hash = `#/jobs/${job.id}`;
    } catch (err) {
      if (err.status) pending = null; // the server answered: a retry is a new submission
      showError(err, "The job was not submitted");
      markInvalid(form, err.field);
      submit.textContent = "Submit job";
      priced = null;
      schedule();
    }
  });
  setTimeout(estimate, 0);
  return form;
}
