// Building DOM nodes safely: every piece of data becomes a text node or an attribute value,
// never markup (dataset and column names are chosen by users).

const SVG_NS = "http://www.w3.org/2000/svg";

function build(node, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else if (name === "text") {
      node.textContent = value;
    } else if (name === "style") {
      node.style.cssText = value; // through CSSOM: the CSP refuses style attributes
    } else if (name === "dataset") {
      Object.assign(node.dataset, value);
    } else if (name === "value" || name === "checked" || name === "selected") {
      node[name] = value;
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** An HTML element: h("a", {href: "#/jobs"}, "Jobs"). */
export function h(tag, attrs = {}, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element, same calling convention as h(). */
export function s(tag, attrs = {}, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

/** A number for people: three significant digits, exponent notation when tiny or huge. */
export function num(x, digits = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return "—";
  if (x === 0) return "0";
  const a = Math.abs(x);
  if (a < 1e-3 || a >= 1e6) return x.toExponential(digits - 1).replace(/\.?0+e/, "e").replace("e+", "e");
  return String(Number(x.toPrecision(digits)));
}

/** A count for people: a whole number with its thousands apart (53 940), a thin space between
 * them as the charts' axes have. */
export function count(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "—";
  return Math.round(n).toLocaleString("en-US").replace(/,/g, "\u2009");
}

/** A number of seconds in words: "0.42 s", "12 s", "3.5 min", "1.2 h". */
export function seconds(x) {
  if (x < 10) return `${num(x, 2)} s`;
  if (x < 90) return `${Math.round(x)} s`;
  if (x < 5400) return `${num(x / 60, 2)} min`;
  return `${num(x / 3600, 2)} h`;
}

// The browser's own time zone, named on every time stamp (e.g. "UTC", "GMT+1", "PST").
const DATE_FORMAT = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit",
  timeZoneName: "short",
});

/** A <time> element for an RFC 3339 timestamp, in the browser's time zone, which it names
 * (null: a dash). The title keeps the server's UTC value. */
export function time(iso) {
  if (!iso) return h("span", { class: "muted" }, "—");
  return h("time", { datetime: iso, title: `${iso} (UTC)` }, DATE_FORMAT.format(new Date(iso)));
}

/**
 * A problem's `detail` (or any server text) as nodes: `backticked` names become <code>, the
 * rest stays plain text. Never markup from the server, never its markdown source.
 */
export function richText(text) {
  return String(text ?? "").split(/`([^`]+)`/).map((part, i) => (i % 2 ? h("code", {}, part) : part));
}

export function shortId(id) {
  return String(id).slice(0, 8);
}

let nextId = 0;

/** A labelled form control (label, control, optional hint tied by aria-describedby). */
export function field(labelText, control, hint) {
  if (!control.id) control.id = `f${++nextId}-${(control.name || "field").replace(/[^\w-]/g, "-")}`;
  const hintNode = hint ? h("small", { class: "hint", id: `${control.id}-hint` }, hint) : null;
  if (hintNode) control.setAttribute("aria-describedby", hintNode.id);
  return h("div", { class: "field" }, h("label", { class: "label", for: control.id }, labelText), control, hintNode);
}

/** Mark the control a problem names (422 `field`) and clear earlier marks in the form. */
export function markInvalid(form, fieldName) {
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  if (!fieldName) return;
  const control = form.elements.namedItem(fieldName);
  if (control && control.setAttribute) {
    control.setAttribute("aria-invalid", "true");
    control.focus();
  }
}
