// The privacy budget drawn on one scale everywhere (the dataset's gauge, the bars in lists and
// in a job's price), and a job's progress bar.
//
// The scale is the share of the cap's mu squared. Gaussian-DP costs compose as the root of the
// sum of squares (mu_total = sqrt(mu_1^2 + mu_2^2 + ...)), so shares of mu_cap^2 add up: a job
// of mu takes (mu / mu_cap)^2 of the budget, whatever ran before it. Epsilon (at the dataset's
// delta) does not add up job by job, so it labels the remainder but never sets a fill.

import { h, num, s } from "./dom.js";

/** The share of the budget (0 to 1) that a cost of `mu` takes under a cap of `muCap`. */
export function share(mu, muCap) {
  return muCap > 0 && mu > 0 ? Math.min(1, (mu * mu) / (muCap * muCap)) : 0;
}

/** A share for people: "13%", "<1%" for a sliver, "0%" for nothing. */
export function pct(x) {
  if (!(x > 0)) return "0%";
  if (x < 0.005) return "<1%";
  return `${Math.round(x * 100)}%`;
}

/** {remaining, reserved, spent} shares of a Budget (they add to 1). */
export function shares(b) {
  const reserved = share(b.mu_reserved, b.mu_cap);
  const spent = share(b.mu_spent, b.mu_cap);
  return { remaining: share(b.mu_remaining, b.mu_cap), reserved, spent };
}

/** One sentence on how costs compose, shown next to the budget's figures. */
export const COMPOSITION_NOTE =
  "One scale: each share is (μ / μ cap)², because Gaussian-DP costs add in squares " +
  "(μ of all releases = √(μ₁² + μ₂² + …)). ε at the dataset's δ does not add up: " +
  "a job at ε 1 on an ε 3 budget leaves about ε 2.75, not ε 2.";

function polar(cx, cy, r, angle) {
  return [cx + r * Math.cos(angle), cy - r * Math.sin(angle)];
}

/** An arc of the half-disc from fraction a to fraction b (0 = left, 1 = right). */
function arc(cx, cy, r, a, b) {
  const [x0, y0] = polar(cx, cy, r, Math.PI * (1 - a));
  const [x1, y1] = polar(cx, cy, r, Math.PI * (1 - b));
  return `M ${x0.toFixed(2)} ${y0.toFixed(2)} A ${r} ${r} 0 0 1 ${x1.toFixed(2)} ${y1.toFixed(2)}`;
}

function swatch(kind) {
  return h("span", { class: `swatch swatch-${kind}`, "aria-hidden": "true" });
}

/**
 * The dataset's budget as a half-disc meter that fills what remains (then what queued jobs
 * reserve; the empty rest is spent), its figures in a legend, and the composition note.
 * `countMu`: the cost of the noisy row count, when one was released.
 */
export function budgetGauge(b, { countMu = null } = {}) {
  const sh = shares(b);
  const cx = 110, cy = 104, r = 88, width = 20;
  const svg = s("svg", { viewBox: "0 0 220 118", class: "gauge-arc", "aria-hidden": "true", focusable: "false" },
    s("path", { d: arc(cx, cy, r, 0, 1), class: "gauge-track", "stroke-width": width }));
  let start = 0;
  for (const kind of ["remaining", "reserved"]) {
    const end = Math.min(1, start + sh[kind]);
    if (end - start > 1e-4) svg.append(s("path", { d: arc(cx, cy, r, start, end), class: `gauge-${kind}`, "stroke-width": width }));
    start = end;
  }
  svg.append(
    s("text", { x: cx, y: cy - 26, class: "gauge-value", "text-anchor": "middle" }, `ε ${num(b.epsilon_remaining)}`),
    s("text", { x: cx, y: cy - 6, class: "gauge-sub", "text-anchor": "middle" }, `${pct(sh.remaining)} left`),
  );
  const valueText = `ε ${num(b.epsilon_remaining)} of ${num(b.epsilon)} remaining (μ ${num(b.mu_remaining)}, ${pct(sh.remaining)} of the budget)`;
  return h("div", { class: "budget" },
    h("figure", { class: "gauge", role: "meter", "aria-label": "Budget remaining", "aria-valuemin": 0,
      "aria-valuemax": 100, "aria-valuenow": Math.round(sh.remaining * 100), "aria-valuetext": valueText },
    svg,
    h("figcaption", {}, h("strong", {}, "Budget remaining"), h("span", {}, `of ε ${num(b.epsilon)} at δ ${num(b.delta)} (μ cap ${num(b.mu_cap)})`))),
    h("ul", { class: "legend budget-legend", "aria-label": "Budget legend" },
      h("li", {}, swatch("remaining"), h("strong", {}, "Remaining "), `${pct(sh.remaining)}: ε ${num(b.epsilon_remaining)}, μ ${num(b.mu_remaining)}`),
      h("li", {}, swatch("reserved"), h("strong", {}, "Reserved "), `${pct(sh.reserved)}: μ ${num(b.mu_reserved)} for queued jobs`),
      h("li", {}, swatch("spent"), h("strong", {}, "Spent "), `${pct(sh.spent)}: μ ${num(b.mu_spent)}`,
        countMu ? ` (the noisy row count's μ ${num(countMu)} included)` : "")),
    h("p", { class: "muted small composition" }, COMPOSITION_NOTE),
  );
}

/**
 * A thin horizontal bar on the same scale: what remains (filled), then `job` (a price being
 * considered, drawn as its own segment), reserved; the rest is spent. For lists and previews.
 */
export function budgetBar(b, { job = 0, label = "Budget left" } = {}) {
  const sh = shares(b);
  const jobShare = Math.min(sh.remaining, share(job, b.mu_cap));
  const parts = [["remaining", sh.remaining - jobShare], ["job", jobShare], ["reserved", sh.reserved]];
  const text = job
    ? `${pct(sh.remaining - jobShare)} of the budget would be left after this job's ${pct(jobShare)}`
    : `${pct(sh.remaining)} of the budget left`;
  return h("span", { class: "budget-bar", role: "meter", "aria-label": label, "aria-valuemin": 0, "aria-valuemax": 100,
    "aria-valuenow": Math.round((sh.remaining - jobShare) * 100), "aria-valuetext": text, title: text },
  parts.filter(([, x]) => x > 0).map(([kind, x]) =>
    h("span", { class: `bar-${kind}`, style: `width: ${(x * 100).toFixed(2)}%` })));
}

/** A job's progress: a native <progress> (role progressbar) with its label and numbers. */
export function progress(job) {
  const total = Math.max(1, job.progress.iterations || 0);
  const done = job.status === "succeeded" ? total : Math.min(job.progress.iteration, total);
  const bar = h("progress", {
    max: total,
    value: done,
    class: `progress status-${job.status}`,
    "aria-label": `Progress of job ${String(job.id).slice(0, 8)}`,
  });
  bar.value = done; // the property, so that a running job's bar is not indeterminate
  return h("span", { class: "progress-cell" }, bar, h("span", { class: "progress-text" }, `${done}/${total}`));
}
