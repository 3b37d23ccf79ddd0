// What every chart shares: round ticks, linear scales, the colour cycle, and drawing at the
// width of the card a chart sits in (redrawn when that width changes).

import { num, s } from "./dom.js";

// Eight colours that stay apart for common colour-vision deficiencies; centres cycle through.
export const PALETTE = ["#3b6fb6", "#e08a1e", "#2e9e6b", "#c8423a", "#7d5ab5", "#8c6a3c", "#d06aa8", "#5f6b78"];

export function colour(i) {
  return PALETTE[i % PALETTE.length];
}

/** A round step (1, 2 or 5 times a power of ten) near span / count. */
function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  const unit = raw / power;
  return (unit <= 1 ? 1 : unit <= 2 ? 2 : unit <= 5 ? 5 : 10) * power;
}

/**
 * Round ticks covering [lo, hi]: about `count` of them at a 1-2-5 step, and the axis range
 * widened to the outer ticks. {ticks, range: [first, last], step}.
 */
export function niceTicks(lo, hi, count = 5) {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return { ticks: [0, 1], range: [0, 1], step: 1 };
  if (hi < lo) [lo, hi] = [hi, lo];
  if (hi - lo < 1e-12 * Math.max(1, Math.abs(lo), Math.abs(hi))) {
    const pad = Math.abs(lo) * 0.1 || 1;
    lo -= pad;
    hi += pad;
  }
  const step = niceStep(hi - lo, count);
  const first = Math.floor(lo / step) * step;
  const last = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let i = 0; first + i * step <= last + step * 1e-9; i++) {
    // Rounded to the step's own precision, so 0.1 * 3 prints as 0.3.
    ticks.push(Number((first + i * step).toPrecision(12)));
  }
  return { ticks, range: [first, last], step };
}

/** A tick's label: as many digits as the step needs, no more. */
export function tickLabel(value, step) {
  if (value === 0) return "0";
  const a = Math.abs(value);
  if (a >= 1e6 || a < 1e-3) return num(value, 2);
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  return value.toLocaleString("en-US", { minimumFractionDigits: decimals, maximumFractionDigits: decimals })
    .replace(/,/g, "\u2009"); // thin space between thousands
}

export function scale([lo, hi], [a, b]) {
  return (v) => a + ((v - lo) / (hi - lo)) * (b - a);
}

/** The framed plot area with horizontal grid lines and labels at `ticks` (a niceTicks). */
export function yAxis(svg, { L, R, T, W, Y, ticks }) {
  for (const v of ticks.ticks) {
    svg.append(
      s("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), class: "grid" }),
      s("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end", class: "tick" }, tickLabel(v, ticks.step)),
    );
  }
  return svg;
}

/** A rotated axis title on the left. */
export function yTitle(svg, text, { T, H, B }) {
  const y = (T + H - B) / 2;
  svg.append(s("text", { x: 14, y, "text-anchor": "middle", class: "axis-label", transform: `rotate(-90 14 ${y})` }, text));
}

const MIN_WIDTH = 280;

/**
 * Draw into `holder` at its own width, and again whenever that width changes (a window
 * resized, a phone turned): `draw(width)` returns the <svg>, drawn with one viewBox unit per
 * pixel so its text stays at its size. Before the holder is on the page it draws at 640.
 */
export function fitted(holder, draw) {
  let drawn = 0;
  let attached = false;
  const render = (width) => {
    drawn = width;
    holder.replaceChildren(draw(width));
  };
  render(Math.max(MIN_WIDTH, Math.floor(holder.clientWidth) || 640));
  if (typeof ResizeObserver === "undefined") return holder;
  const observer = new ResizeObserver(() => {
    if (!holder.isConnected) {
      if (attached) observer.disconnect(); // the view was left
      return;
    }
    attached = true;
    const width = Math.max(MIN_WIDTH, Math.floor(holder.clientWidth));
    if (Math.abs(width - drawn) > 2) render(width);
  });
  observer.observe(holder);
  return holder;
}
