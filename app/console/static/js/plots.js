// The private summaries drawn with their noise: cluster sizes as bars with error bars, and a
// sweep's loss against k with error bars. Every figure here is a noisy release; each is drawn
// with ± one standard deviation of its noise, so two that overlap are not told apart.

import { colour, niceTicks, scale, tickLabel, yAxis, yTitle } from "./axes.js";
import { count, num, s } from "./dom.js";

function errorBar(x, lo, hi, half = 6) {
  return [
    s("line", { x1: x, x2: x, y1: lo, y2: hi, class: "error-bar" }),
    s("line", { x1: x - half, x2: x + half, y1: lo, y2: lo, class: "error-bar" }),
    s("line", { x1: x - half, x2: x + half, y1: hi, y2: hi, class: "error-bar" }),
  ];
}

/**
 * The private cluster sizes (noisy counts, never the exact ones), each ± `se` (one standard
 * deviation of its noise; none drawn when unknown): one <rect class="bar"> per centre.
 */
export function sizeBars(sizes, title, { se = null, width = 640 } = {}) {
  const W = width, H = 300, L = 70, R = 20, T = 16, B = 44;
  const err = (i) => (Array.isArray(se) ? se[i] : se) || 0;
  // Headroom above the tallest bar (and its error bar) for its label.
  const ticks = niceTicks(0, Math.max(1, ...sizes.map((n, i) => n + err(i))) * 1.08);
  const Y = scale(ticks.range, [H - B, T]);
  const slot = (W - L - R) / sizes.length;
  const barWidth = Math.min(72, slot * 0.6);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img", "aria-label": title });
  svg.append(s("title", {}, title), s("rect", { x: L, y: T, width: W - L - R, height: H - T - B, class: "plot-frame" }));
  yAxis(svg, { L, R, T, W, Y, ticks });
  const every = Math.ceil(sizes.length / Math.max(1, Math.floor((W - L - R) / 70)));
  sizes.forEach((n, i) => {
    const x = L + slot * (i + 0.5), e = err(i);
    const tip = e ? `centre ${i + 1}: about ${count(n)} ± ${num(e, 2)} rows (noisy count)` : `centre ${i + 1}: about ${count(n)} rows (noisy count)`;
    svg.append(
      s("rect", { x: x - barWidth / 2, y: Y(n), width: barWidth, height: Math.max(0, Y(0) - Y(n)), fill: colour(i),
        class: "bar", dataset: { index: String(i) } }, s("title", {}, tip)),
      ...(e ? errorBar(x, Y(Math.max(0, n - e)), Y(n + e)) : []),
    );
    if (i % every === 0) {
      svg.append(
        s("text", { x, y: Y(n + e) - 6, "text-anchor": "middle", class: "tick" }, e ? `${count(n)} ± ${num(e, 2)}` : count(n)),
        s("text", { x, y: H - B + 16, "text-anchor": "middle", class: "tick" }, every > 1 ? String(i + 1) : `centre ${i + 1}`),
      );
    }
  });
  yTitle(svg, "rows (noisy count)", { T, H, B });
  return svg;
}

/**
 * A sweep's noisy loss against k, ± one standard error each: one <g class="point"> per k that
 * has a loss. The suggested k's point is marked ("suggested") only when there is one: a sweep
 * whose losses cannot tell its ks apart suggests none, and then no point stands out.
 */
export function lossChart(points, suggestedK, title, { scaled = false, width = 640 } = {}) {
  const W = width, H = 320, L = 78, R = 20, T = 16, B = 52;
  const done = points.filter((p) => p.loss !== null && p.loss !== undefined);
  const ks = points.map((p) => p.k);
  const values = done.flatMap((p) => [p.loss - (p.loss_se || 0), p.loss + (p.loss_se || 0)]);
  const ticks = values.length ? niceTicks(Math.min(...values), Math.max(...values)) : niceTicks(0, 1);
  const kLo = Math.min(...ks), kHi = Math.max(...ks);
  const X = scale([kLo - 0.5, kHi + 0.5], [L, W - R]);
  const Y = scale(ticks.range, [H - B, T]);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img", "aria-label": title });
  svg.append(s("title", {}, title), s("rect", { x: L, y: T, width: W - L - R, height: H - T - B, class: "plot-frame" }));
  yAxis(svg, { L, R, T, W, Y, ticks });
  if (ticks.range[0] < 0 && ticks.range[1] > 0) {
    svg.append(s("line", { x1: L, x2: W - R, y1: Y(0), y2: Y(0), class: "zero-line" }));
  }
  for (const k of ks) svg.append(s("text", { x: X(k), y: H - B + 16, "text-anchor": "middle", class: "tick" }, String(k)));
  svg.append(s("text", { x: (L + W - R) / 2, y: H - 10, "text-anchor": "middle", class: "axis-label" }, "k (number of centres)"));
  yTitle(svg, scaled ? "loss, scaled space (noisy)" : "loss, squared units (noisy)", { T, H, B });
  if (done.length > 1) {
    svg.append(s("path", { class: "loss-line",
      d: done.map((p, i) => `${i ? "L" : "M"} ${X(p.k).toFixed(2)} ${Y(p.loss).toFixed(2)}`).join(" ") }));
  }
  for (const p of done) {
    const x = X(p.k), se = p.loss_se || 0;
    const suggested = suggestedK !== null && suggestedK !== undefined && p.k === suggestedK;
    svg.append(s("g", { class: suggested ? "point suggested" : "point", dataset: { k: String(p.k) } },
      s("title", {}, `k = ${p.k}: loss ${num(p.loss, 4)} ± ${num(se, 3)}${suggested ? " (suggested k)" : ""}`),
      ...errorBar(x, Y(p.loss - se), Y(p.loss + se)),
      s("circle", { cx: x, cy: Y(p.loss), r: suggested ? 8 : 5 }),
      suggested ? s("text", { x: x + 12, y: Y(p.loss) - 10, class: "centre-label" }, "suggested") : null,
    ));
  }
  return svg;
}

/** Where the loss is measured: the columns' own units, or the scaled space of a box dataset. */
export function lossUnit(space) {
  return space === "scaled"
    ? "squared fractions of each column's declared range (the scaled space)"
    : "squared units of the data";
}
