// A job's private centres: a scatter over two columns, or parallel coordinates; in both every
// axis spans its column's declared domain (public), so a centre's place on an axis means
// something and the two pictures agree.
// Nothing here sees a data row.

import { colour, niceTicks, scale, tickLabel, yAxis, yTitle } from "./axes.js";
import { h, num, s } from "./dom.js";

/**
 * Each column's declared range [lo, hi]: the dataset's per-column bounds when it has them,
 * else its ball's centre ± radius. Null when the dataset is unknown.
 */
export function domainRanges(ds, d) {
  const domain = ds?.domain;
  if (!domain) return null;
  if (Array.isArray(domain.lower) && Array.isArray(domain.upper) && domain.lower.length === d) {
    return domain.lower.map((lo, j) => [lo, domain.upper[j]]);
  }
  if (Array.isArray(domain.center) && domain.center.length === d && domain.radius > 0) {
    return domain.center.map((c) => [c - domain.radius, c + domain.radius]);
  }
  return null;
}

function extentOf(values) {
  let lo = Math.min(...values), hi = Math.max(...values);
  const pad = (hi - lo) * 0.08 || Math.abs(lo) * 0.1 || 1;
  return [lo - pad, hi + pad];
}

/**
 * One axis: exactly the declared range with round ticks inside it, or (domain unknown) the
 * values' own extent widened to round ticks. {ticks, span}.
 */
function axisOver(declared, values, count) {
  const ticks = niceTicks(...(declared ?? extentOf(values)), count);
  const span = declared ?? ticks.range;
  const inside = ticks.ticks.filter((v) => v >= span[0] - 1e-9 && v <= span[1] + 1e-9);
  return { ticks: { ...ticks, ticks: inside }, span };
}

/**
 * The k centres over columns xi and yi: one <circle class="centre"> each, and with `errors`
 * (the result's `accuracy.centre_error`, per column) a cross of <line class="centre-error">
 * through it spanning ± the band in both columns. Each axis spans its column's `ranges[j]`
 * (the declared domain, as the parallel view's axes do), else the centres' own extent.
 */
export function scatter(centers, columns, xi, yi, title, width = 640, errors = null, ranges = null) {
  const W = width, H = Math.round(Math.min(460, Math.max(300, width * 0.62))), L = 70, R = 20, T = 16, B = 52;
  const ex = errors?.[xi] ?? 0, ey = errors?.[yi] ?? 0;
  const xa = axisOver(ranges?.[xi], centers.flatMap((c) => [c[xi] - ex, c[xi] + ex]));
  const ya = axisOver(ranges?.[yi], centers.flatMap((c) => [c[yi] - ey, c[yi] + ey]));
  const xt = xa.ticks, yt = ya.ticks;
  const X = scale(xa.span, [L, W - R]);
  const Y = scale(ya.span, [H - B, T]);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img", "aria-label": title });
  svg.append(s("title", {}, title), s("rect", { x: L, y: T, width: W - L - R, height: H - T - B, class: "plot-frame" }));
  yAxis(svg, { L, R, T, W, Y, ticks: yt });
  for (const v of xt.ticks) {
    svg.append(
      s("line", { x1: X(v), x2: X(v), y1: T, y2: H - B, class: "grid" }),
      s("text", { x: X(v), y: H - B + 16, "text-anchor": "middle", class: "tick" }, tickLabel(v, xt.step)),
    );
  }
  svg.append(s("text", { x: (L + W - R) / 2, y: H - 10, "text-anchor": "middle", class: "axis-label" }, columns[xi]));
  yTitle(svg, columns[yi], { T, H, B });
  centers.forEach((c, i) => {
    const cx = X(c[xi]), cy = Y(c[yi]);
    if (errors) {
      svg.append(
        s("line", { x1: X(c[xi] - ex), x2: X(c[xi] + ex), y1: cy, y2: cy, stroke: colour(i), class: "centre-error" }),
        s("line", { x1: cx, x2: cx, y1: Y(c[yi] - ey), y2: Y(c[yi] + ey), stroke: colour(i), class: "centre-error" }),
      );
    }
    svg.append(
      s("circle", { cx, cy, r: 7, fill: colour(i), class: "centre", dataset: { index: String(i) } },
        s("title", {}, `centre ${i + 1}: ${columns[xi]} = ${num(c[xi], 4)}, ${columns[yi]} = ${num(c[yi], 4)}`)),
      s("text", { x: cx + 10, y: cy - 8, class: "centre-label" }, String(i + 1)),
    );
  });
  return svg;
}

/**
 * Parallel coordinates: one vertical axis per column, each spanning `ranges[j]` (the declared
 * domain; the centres' own extent when it is unknown) with round ticks at both ends and the
 * middle, and one <path class="centre"> per centre; with `errors` (per column) a
 * <line class="centre-error"> on every axis spanning ± the band around each centre, within the axis.
 */
export function parallel(centers, columns, title, ranges = null, width = 640, errors = null) {
  const d = columns.length;
  const L = 56, R = 56, T = 40, B = 40, H = 380;
  const W = Math.max(width, L + R + (d > 12 ? 44 : 90) * (d - 1));
  // Each axis spans exactly its declared range, with round ticks inside it (the centres' own
  // extent, widened to round ticks, when the domain is unknown).
  const axes = columns.map((_, j) => {
    const { ticks, span } = axisOver(ranges?.[j], centers.map((c) => c[j]), 4);
    return { ticks, span, Y: scale(span, [H - B, T]) };
  });
  const x = (j) => (d === 1 ? W / 2 : L + (j * (W - L - R)) / (d - 1));
  const every = Math.ceil(d / 24); // label at most ~24 axes so the names stay readable
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img", "aria-label": title,
    style: W > width ? `min-width: ${W}px` : null });
  svg.append(s("title", {}, title));
  columns.forEach((name, j) => {
    const { ticks, span, Y } = axes[j];
    svg.append(s("line", { x1: x(j), x2: x(j), y1: T, y2: H - B, class: "pc-axis" }));
    if (j % every) return;
    svg.append(s("text", { x: x(j), y: T - 20, "text-anchor": "middle", class: "axis-label" }, name));
    for (const v of ticks.ticks) {
      svg.append(
        s("line", { x1: x(j) - 4, x2: x(j) + 4, y1: Y(v), y2: Y(v), class: "pc-axis" }),
        s("text", { x: x(j) + 7, y: Y(v) + 4, class: "tick" }, tickLabel(v, ticks.step)),
      );
    }
    // The ends of the declared range, where the axis stops, unless a tick already says them.
    const ticked = (v) => ticks.ticks.some((t) => Math.abs(t - v) <= 1e-9 * Math.max(1, Math.abs(v)));
    if (!ticked(span[1])) svg.append(s("text", { x: x(j), y: T - 6, "text-anchor": "middle", class: "tick" }, num(span[1])));
    if (!ticked(span[0])) svg.append(s("text", { x: x(j), y: H - B + 14, "text-anchor": "middle", class: "tick" }, num(span[0])));
  });
  centers.forEach((c, i) => {
    const path = c.map((v, j) => `${j ? "L" : "M"} ${x(j).toFixed(2)} ${axes[j].Y(v).toFixed(2)}`).join(" ");
    svg.append(s("path", { d: path, stroke: colour(i), class: "centre", dataset: { index: String(i) } },
      s("title", {}, `centre ${i + 1}: ${c.map((v, j) => `${columns[j]} ${num(v, 4)}`).join(", ")}`)));
    if (!errors) return;
    c.forEach((v, j) => {
      const [lo, hi] = axes[j].span, within = (u) => Math.min(Math.max(u, lo), hi);
      const cx = x(j) + ((i % 5) - 2) * 2; // side by side, so that the bars of close centres show
      svg.append(s("line", { x1: cx, x2: cx, y1: axes[j].Y(within(v - errors[j])), y2: axes[j].Y(within(v + errors[j])),
        stroke: colour(i), class: "centre-error" }));
    });
  });
  return svg;
}

/** The colour key shared by both pictures. */
export function legend(k) {
  return h("ul", { class: "legend", "aria-label": "Centres" },
    Array.from({ length: k }, (_, i) =>
      h("li", {}, h("span", { class: "swatch", style: `background:${colour(i)}` }), `centre ${i + 1}`)));
}
