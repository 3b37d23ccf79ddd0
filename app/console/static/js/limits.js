// The limits beside a dataset's lifetime cap: its pace, each capped key's cap and pace, and the
// spending of each key over time (composed in squares, as the budget is).

import { h, num, shortId, time } from "./dom.js";
import { emptyState } from "./ui.js";

const PERIOD = { day: "a day", week: "a week (from Monday, UTC)", month: "a month" };

/** A pace as one sentence: its rate, what this period has left, and when it renews. */
export function paceText(pace) {
  return `at most μ ${num(pace.mu)} ${PERIOD[pace.period] || pace.period}; μ ${num(pace.mu_remaining)} ` +
    `left this ${pace.period}, renews ${time(pace.renews_at)}`;
}

/** The dataset's pace and key caps, shown next to its budget gauge. */
export function budgetLimits(budget) {
  const keys = budget.keys || [];
  return h("div", { class: "limits", "aria-label": "Pace and key caps" },
    h("p", { class: "small" }, h("strong", {}, "Pace: "),
      budget.pace ? paceText(budget.pace) : "none (spending is limited by the cap alone)",
      h("span", { class: "muted" },
        ". The cap is the lifetime guarantee and never renews; a pace only limits how fast it is spent.")),
    keys.length
      ? h("table", { class: "small", "aria-label": "Key caps" },
        h("thead", {}, h("tr", {}, ["Key", "Cap", "Spent", "Left", "Pace"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, keys.map((k) => h("tr", {},
          h("td", {}, h("code", {}, shortId(k.key_id))),
          h("td", {}, `ε ${num(k.epsilon)} (μ ${num(k.mu_cap)})`),
          h("td", {}, `μ ${num(k.mu_spent)}${k.mu_reserved ? ` + ${num(k.mu_reserved)} reserved` : ""}`),
          h("td", {}, `ε ${num(k.epsilon_remaining)} (μ ${num(k.mu_remaining)})`),
          h("td", {}, k.pace ? paceText(k.pace) : "none")))))
      : h("p", { class: "small muted" }, "No key caps: every key shares what the dataset has left."));
}

/**
 * Each key's spending by day (UTC) from the ledger's `reserve` entries: the μ its jobs were
 * admitted with that day, composed as √(Σ μ²). Refunds are not subtracted (a pace counts them too).
 */
export function spendingByKey(entries) {
  const days = new Map(); // "day|key" -> sum of squares
  for (const e of entries) {
    if (e.kind !== "reserve" || e.mu === null) continue;
    const at = `${e.created_at.slice(0, 10)}|${e.actor || "none"}`;
    days.set(at, (days.get(at) || 0) + e.mu * e.mu);
  }
  if (!days.size) return emptyState("No job admitted yet.");
  const rows = [...days.entries()].sort(([a], [b]) => (a < b ? 1 : -1));
  return h("table", { class: "small", "aria-label": "Spending per key per day" },
    h("thead", {}, h("tr", {}, ["Day (UTC)", "Key", "Admitted μ"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows.map(([at, sq]) => {
      const [day, key] = at.split("|");
      return h("tr", {}, h("td", {}, day), h("td", {}, key === "none" ? "—" : h("code", {}, shortId(key))),
        h("td", {}, `μ ${num(Math.sqrt(sq))}`));
    })));
}

/** What a job leaves of the asking key's cap, or why the estimate would be refused. */
export function keyPriceLines(est) {
  const lines = [];
  const WHY = {
    key: "your key's cap on this dataset",
    "dataset-pace": "this dataset's pace for the current period",
    "key-pace": "your key's pace for the current period",
  };
  if (!est.admissible && WHY[est.refused_by]) lines.push(h("p", {}, `Refused by ${WHY[est.refused_by]}.`));
  const after = est.key_budget_after;
  if (after) {
    lines.push(h("p", { "data-field": "key-cap-left" },
      est.admissible ? "This job leaves " : "Your key's cap has ",
      h("strong", {}, `ε ${num(after.epsilon_remaining)}`), ` (μ ${num(after.mu_remaining)}) of your key's cap `,
      `(ε ${num(after.epsilon)}, μ ${num(after.mu_cap)}) on this dataset.`));
  }
  return lines;
}
