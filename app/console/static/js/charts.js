// SVG pictures drawn from what the API released: budget gauges, job progress, and the private
// centres (a scatter over two columns, or parallel coordinates). Nothing here sees a data row.

import { h, num, s } from "./dom.js";

// Eight colours that stay apart for common colour-vision deficiencies; centres cycle through.
export const PALETTE = ["#3b6fb6", "#e08a1e", "#2e9e6b", "#c8423a", "#7d5ab5", "#8c6a3c", "#d06aa8", "#5f6b78"];

function colour(i) {
  return PALETTE[i % PALETTE.length];
}

function polar(cx, cy, r, angle) {
  return [cx + r * Math.cos(angle), cy - r * Math.sin(angle)];
}

/** An arc of the half-disc gauge from fraction a to fraction b (0 = left, 1 = right). */
function arc(cx, cy, r, a, b) {
  const [x0, y0] = polar(cx, cy, r, Math.PI * (1 - a));
  const [x1, y1] = polar(cx, cy, r, Math.PI * (1 - b));
  return `M ${x0.toFixed(2)} ${y0.toFixed(2)} A ${r} ${r} 0 0 1 ${x1.toFixed(2)} ${y1.toFixed(2)}`;
}

/**
 * A half-disc gauge. `segments` are [{fraction, kind, label}] filled from the left; the rest of
 * the arc is what remains. `value`/`max` give the meter's accessible value.
 */
export function gauge({ label, value, max, valueText, segments, caption }) {
  const cx = 90, cy = 86, r = 70, width = 16;
  const svg = s(
    "svg",
    { viewBox: "0 0 180 100", class: "gauge-arc", "aria-hidden": "true", focusable: "false" },
    s("path", { d: arc(cx, cy, r, 0, 1), class: "gauge-track", "stroke-width": width }),
  );
  let start = 0;
  for (const seg of segments) {
    const end = Math.min(1, start + Math.max(0, seg.fraction));
    if (end - start > 1e-4) {
      svg.append(s("path", { d: arc(cx, cy, r, start, end), class: `gauge-${seg.kind}`, "stroke-width": width }));
    }
    start = end;
  }
  svg.append(s("text", { x: cx, y: cy - 8, class: "gauge-value", "text-anchor": "middle" }, valueText));
  return h(
    "figure",
    {
      class: "gauge",
      role: "meter",
      "aria-label": label,
      "aria-valuemin": 0,
      "aria-valuemax": max,
      "aria-valuenow": value,
      "aria-valuetext": `${valueText} of ${num(max)} remaining`,
    },
    svg,
    h("figcaption", {}, h("strong", {}, label), caption ? h("span", {}, caption) : null),
  );
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

function extent(values) {
  let lo = Math.min(...values), hi = Math.max(...values);
  if (!(hi > lo)) {
    const pad = Math.abs(lo) * 0.1 || 1;
    lo -= pad;
    hi += pad;
  }
  const pad = (hi - lo) * 0.08;
  return [lo - pad, hi + pad];
}

function scale([lo, hi], [a, b]) {
  return (v) => a + ((v - lo) / (hi - lo)) * (b - a);
}

/** The k centres over columns xi and yi: one <circle class="centre"> per centre. */
export function scatter(centers, columns, xi, yi, title) {
  const W = 560, H = 400, L = 64, R = 20, T = 20, B = 52;
  const xs = extent(centers.map((c) => c[xi]));
  const ys = extent(centers.map((c) => c[yi]));
  const X = scale(xs, [L, W - R]);
  const Y = scale(ys, [H - B, T]);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img", "aria-label": title });
  svg.append(s("title", {}, title));
  svg.append(s("rect", { x: L, y: T, width: W - L - R, height: H - T - B, class: "plot-frame" }));
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    const xv = xs[0] + t * (xs[1] - xs[0]);
    const yv = ys[0] + t * (ys[1] - ys[0]);
    svg.append(
      s("line", { x1: X(xv), x2: X(xv), y1: T, y2: H - B, class: "grid" }),
      s("text", { x: X(xv), y: H - B + 16, "text-anchor": "middle", class: "tick" }, num(xv)),
      s("line", { x1: L, x2: W - R, y1: Y(yv), y2: Y(yv), class: "grid" }),
      s("text", { x: L - 6, y: Y(yv) + 4, "text-anchor": "end", class: "tick" }, num(yv)),
    );
  }
  svg.append(
    s("text", { x: (L + W - R) / 2, y: H - 10, "text-anchor": "middle", class: "axis-label" }, columns[xi]),
    s("text", { x: 14, y: (T + H - B) / 2, "text-anchor": "middle", class: "axis-label",
      transform: `rotate(-90 14 ${(T + H - B) / 2})` }, columns[yi]),
  );
  centers.forEach((c, i) => {
    const cx = X(c[xi]), cy = Y(c[yi]);
    svg.append(
      s("circle", { cx, cy, r: 7, fill: colour(i), class: "centre", dataset: { index: String(i) } },
        s("title", {}, `centre ${i + 1}: ${columns[xi]} = ${num(c[xi], 4)}, ${columns[yi]} = ${num(c[yi], 4)}`)),
      s("text", { x: cx + 10, y: cy - 8, class: "centre-label" }, String(i + 1)),
    );
  });
  return svg;
}

/** Parallel coordinates: one vertical axis per column, one <path class="centre"> per centre. */
export function parallel(centers, columns, title) {
  const d = columns.length;
  const gap = d > 12 ? 44 : 90;
  const L = 40, R = 40, T = 34, B = 40, H = 380;
  const W = Math.max(560, L + R + gap * (d - 1));
  const scales = columns.map((_, j) => scale(extent(centers.map((c) => c[j])), [H - B, T]));
  const ranges = columns.map((_, j) => extent(centers.map((c) => c[j])));
  const x = (j) => (d === 1 ? W / 2 : L + (j * (W - L - R)) / (d - 1));
  const every = Math.ceil(d / 24); // label at most ~24 axes so the names stay readable
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img", "aria-label": title,
    style: `min-width: ${Math.min(W, 1600)}px` });
  svg.append(s("title", {}, title));
  columns.forEach((name, j) => {
    svg.append(s("line", { x1: x(j), x2: x(j), y1: T, y2: H - B, class: "pc-axis" }));
    if (j % every === 0) {
      svg.append(
        s("text", { x: x(j), y: T - 14, "text-anchor": "middle", class: "axis-label" }, name),
        s("text", { x: x(j), y: T - 2, "text-anchor": "middle", class: "tick" }, num(ranges[j][1])),
        s("text", { x: x(j), y: H - B + 16, "text-anchor": "middle", class: "tick" }, num(ranges[j][0])),
      );
    }
  });
  centers.forEach((c, i) => {
    const d_ = c.map((v, j) => `${j ? "L" : "M"} ${x(j).toFixed(2)} ${scales[j](v).toFixed(2)}`).join(" ");
    svg.append(
      s("path", { d: d_, stroke: colour(i), class: "centre", dataset: { index: String(i) } },
        s("title", {}, `centre ${i + 1}`)),
    );
  });
  return svg;
}

/** The colour key shared by both pictures. */
export function legend(k) {
  return h(
    "ul",
    { class: "legend", "aria-label": "Centres" },
    Array.from({ length: k }, (_, i) =>
      h("li", {}, h("span", { class: "swatch", style: `background:${colour(i)}` }), `centre ${i + 1}`)),
  );
}

/**
 * The private cluster sizes (noisy counts, never the exact ones): one <rect class="bar"> per
 * centre, in the centres' colours.
 */
export function sizeBars(sizes, title) {
  const W = 560, H = 300, L = 64, R = 20, T = 20, B = 44;
  const top = Math.max(1, ...sizes) * 1.1;
  const Y = scale([0, top], [H - B, T]);
  const slot = (W - L - R) / sizes.length;
  const width = Math.min(64, slot * 0.7);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img", "aria-label": title });
  svg.append(s("title", {}, title));
  svg.append(s("rect", { x: L, y: T, width: W - L - R, height: H - T - B, class: "plot-frame" }));
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    const v = t * top;
    svg.append(
      s("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), class: "grid" }),
      s("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end", class: "tick" }, num(v)),
    );
  }
  const every = Math.ceil(sizes.length / 12); // label at most ~12 bars so the text stays readable
  sizes.forEach((n, i) => {
    const x = L + slot * (i + 0.5);
    svg.append(
      s("rect", { x: x - width / 2, y: Y(n), width, height: Math.max(0, Y(0) - Y(n)), fill: colour(i),
        class: "bar", dataset: { index: String(i) } },
        s("title", {}, `centre ${i + 1}: about ${n} rows (noisy count)`)),
    );
    if (i % every === 0) {
      svg.append(
        s("text", { x, y: Y(n) - 5, "text-anchor": "middle", class: "tick" }, String(n)),
        s("text", { x, y: H - B + 16, "text-anchor": "middle", class: "tick" }, every > 1 ? String(i + 1) : `centre ${i + 1}`),
      );
    }
  });
  svg.append(s("text", { x: 14, y: (T + H - B) / 2, "text-anchor": "middle", class: "axis-label",
    transform: `rotate(-90 14 ${(T + H - B) / 2})` }, "rows (noisy)"));
  return svg;
}

/**
 * A sweep's noisy loss against k, each with error bars of ± one standard error: one
 * <g class="point"> per k that has a loss; the suggested k's point also has class "suggested".
 */
export function lossChart(points, suggestedK, title) {
  const W = 560, H = 320, L = 72, R = 20, T = 20, B = 52;
  const done = points.filter((p) => p.loss !== null && p.loss !== undefined);
  const ks = points.map((p) => p.k);
  const lows = done.map((p) => p.loss - (p.loss_se || 0));
  const highs = done.map((p) => p.loss + (p.loss_se || 0));
  const X = scale(extent(ks), [L, W - R]);
  const ys = done.length ? extent([...lows, ...highs]) : [0, 1];
  const Y = scale(ys, [H - B, T]);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img", "aria-label": title });
  svg.append(s("title", {}, title));
  svg.append(s("rect", { x: L, y: T, width: W - L - R, height: H - T - B, class: "plot-frame" }));
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    const v = ys[0] + t * (ys[1] - ys[0]);
    svg.append(
      s("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), class: "grid" }),
      s("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end", class: "tick" }, num(v)),
    );
  }
  for (const k of ks) {
    svg.append(s("text", { x: X(k), y: H - B + 16, "text-anchor": "middle", class: "tick" }, String(k)));
  }
  svg.append(
    s("text", { x: (L + W - R) / 2, y: H - 10, "text-anchor": "middle", class: "axis-label" }, "k"),
    s("text", { x: 14, y: (T + H - B) / 2, "text-anchor": "middle", class: "axis-label",
      transform: `rotate(-90 14 ${(T + H - B) / 2})` }, "loss (noisy)"),
  );
  if (done.length > 1) {
    svg.append(s("path", { class: "loss-line",
      d: done.map((p, i) => `${i ? "L" : "M"} ${X(p.k).toFixed(2)} ${Y(p.loss).toFixed(2)}`).join(" ") }));
  }
  for (const p of done) {
    const x = X(p.k), se = p.loss_se || 0;
    const suggested = p.k === suggestedK;
    svg.append(s("g", { class: suggested ? "point suggested" : "point", dataset: { k: String(p.k) } },
      s("title", {}, `k = ${p.k}: loss ${num(p.loss, 4)} ± ${num(se, 3)}${suggested ? " (suggested k)" : ""}`),
      s("line", { x1: x, x2: x, y1: Y(p.loss - se), y2: Y(p.loss + se), class: "error-bar" }),
      s("line", { x1: x - 6, x2: x + 6, y1: Y(p.loss - se), y2: Y(p.loss - se), class: "error-bar" }),
      s("line", { x1: x - 6, x2: x + 6, y1: Y(p.loss + se), y2: Y(p.loss + se), class: "error-bar" }),
      s("circle", { cx: x, cy: Y(p.loss), r: suggested ? 8 : 5 }),
      suggested ? s("text", { x: x + 12, y: Y(p.loss) - 10, class: "centre-label" }, "suggested") : null,
    ));
  }
  return svg;
}
