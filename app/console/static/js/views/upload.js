// The owner's upload form: a file (or an import by reference: an s3:// URL or a path on the
// server of Parquet), its declared public domain and its total privacy budget.

import { api } from "../api.js";
import { field, h, markInvalid } from "../dom.js";
import { clearError, showError } from "../ui.js";

/** "1, 2, 3" or "[1, 2, 3]" as the JSON array text the API takes. */
function numberArray(text) {
  const t = text.trim();
  if (!t) return null;
  return t.startsWith("[") ? t : `[${t.split(/[,\s]+/).filter(Boolean).join(", ")}]`;
}

function nameArray(text) {
  const names = text.split(",").map((n) => n.trim()).filter(Boolean);
  return names.length ? JSON.stringify(names) : null;
}

function choice(name, value, label, checked = false) {
  return h("label", { class: "check" }, h("input", { type: "radio", name, value, checked }), ` ${label}`);
}

export async function uploadView(main, { me }) {
  if (me.role !== "owner") {
    main.replaceChildren(h("h1", {}, "Upload"),
      h("p", {}, "Only an owner key can upload datasets; yours is an ", me.role, " key."));
    return;
  }
  const text = (name, attrs = {}) => h("input", { name, type: "text", spellcheck: "false", ...attrs });
  const number = (name, attrs = {}) => h("input", { name, type: "number", step: "any", inputmode: "decimal", ...attrs });
  const file = h("input", { name: "file", type: "file", required: true, accept: ".csv,.npy,.parquet,.pq,text/csv" });
  const name = text("name", { required: true, maxlength: 200 });
  const source = text("source", { maxlength: 2000, placeholder: "s3://bucket/table/ or /data/table.parquet" });
  const fromFile = field("Data file", file);
  const fromSource = field("Import from", source,
    "Parquet (a file or a folder of them) under a prefix the operator allows; a worker copies the rows, "
    + "then the dataset is ready");
  fromSource.hidden = true;
  file.addEventListener("change", () => {
    if (!name.value && file.files[0]) name.value = file.files[0].name.replace(/\.[^.]+$/, "");
  });
  const ball = h("fieldset", { class: "row" }, h("legend", {}, "Ball"),
    field("Radius", number("radius", { min: 0 }), "every row is clipped into this ball"),
    field("Centre (optional)", text("center", { placeholder: "0, 0, …" }), "comma-separated; default: the origin"));
  const box = h("fieldset", { class: "row", hidden: true }, h("legend", {}, "Per-column bounds"),
    field("Lower bounds", text("lower", { placeholder: "-10, -10, …" })),
    field("Upper bounds", text("upper", { placeholder: "10, 10, …" })));
  const countMu = number("count_mu", { min: 0, disabled: true });
  const submit = h("button", { type: "submit" }, "Upload");
  const form = h("form", { class: "card upload", "aria-labelledby": "upload-title", novalidate: true },
    h("h1", { id: "upload-title" }, "Upload a dataset"),
    h("p", { class: "lede" }, "A CSV with a header row, a .npy array, or Parquet. The domain is declared here, ",
      "never computed from the data; rows outside it are clipped into it."),
    h("div", { class: "row" }, choice("origin", "file", "Upload a file", true),
      choice("origin", "source", "Import by reference")),
    fromFile,
    fromSource,
    field("Name", name),
    h("fieldset", { class: "row" }, h("legend", {}, "Total privacy budget"),
      field("Epsilon", number("epsilon", { min: 0, required: true, value: "3" })),
      field("Delta", number("delta", { min: 0, max: 1, required: true, value: "1e-6" }), "well below 1/rows")),
    h("fieldset", {}, h("legend", {}, "Declared public domain"),
      h("div", { class: "row" }, choice("domain", "ball", "A ball", true), choice("domain", "box", "Per-column bounds")),
      ball, box),
    field("Columns to use (optional)", text("columns", { placeholder: "x, y" }), "comma-separated names; default: all"),
    h("fieldset", {}, h("legend", {}, "What one unit of privacy is"),
      h("p", { class: "hint" }, "Without a unit column the guarantee protects one row, not one person: ",
        "a person with many rows (orders, visits) is protected only at that many times the charged μ."),
      field("Unit column (optional)", text("privacy_unit", { placeholder: "customer_id" }),
        "identifies a person or customer; not stored"),
      field("Most rows per unit (m)", number("max_rows_per_unit", { min: 1, step: 1 }),
        "required with a unit column: each unit keeps at most m rows, chosen at random; noise grows m-fold")),
    h("fieldset", {}, h("legend", {}, "Missing values and categories"),
      h("div", { class: "row" }, choice("missing", "reject", "Refuse a missing value", true),
        choice("missing", "drop-row", "Drop rows with one"), choice("missing", "fill", "Fill it")),
      field("Fill values (optional)", text("fill", { placeholder: '{"age": 40, "plan": "basic"}' }),
        "JSON; a column not named takes its domain's centre, never a value computed from the data"),
      field("Categorical columns (optional)", text("categories", { placeholder: '{"plan": ["basic", "premium"]}' }),
        "JSON, public; needs per-column bounds for the numeric columns"),
      field("Category weight", number("category_weight", { min: 0, max: 1, placeholder: "0.2" }),
        "two rows that differ in one category are weight × √2 apart; a numeric column's range counts 1")),
    h("fieldset", {}, h("legend", {}, "Row count"),
      choice("count", "default", "Release a noisy count at the default cost (0.1 × the cap's μ)", true),
      choice("count", "custom", "Release a noisy count at a chosen cost"),
      field("Cost of the count (μ)", countMu),
      choice("count", "public", "The exact row count is already public (nothing released; replace-one neighbours)")),
    submit,
  );
  form.addEventListener("change", () => {
    const domain = form.elements.domain.value;
    ball.hidden = domain !== "ball";
    box.hidden = domain !== "box";
    countMu.disabled = form.elements.count.value !== "custom";
    const byReference = form.elements.origin.value === "source";
    fromFile.hidden = byReference;
    fromSource.hidden = !byReference;
    file.required = !byReference;
    source.required = byReference;
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const f = form.elements;
    const byReference = f.origin.value === "source";
    if (byReference ? !source.value.trim() : !file.files[0]) {
      showError(new Error(byReference ? "enter the s3:// URL or the path to import" : "choose a file to upload"),
        "Nothing to upload");
      markInvalid(form, byReference ? "source" : "file");
      return;
    }
    const data = new FormData();
    if (byReference) data.append("source", source.value.trim());
    else data.append("file", file.files[0]);
    const put = (key, value) => {
      if (value !== null && value !== undefined && value !== "") data.append(key, value);
    };
    put("name", f.name.value.trim());
    put("epsilon", f.epsilon.value);
    put("delta", f.delta.value);
    if (f.domain.value === "ball") {
      put("radius", f.radius.value);
      put("center", numberArray(f.center.value));
    } else {
      put("lower", numberArray(f.lower.value));
      put("upper", numberArray(f.upper.value));
    }
    put("columns", nameArray(f.columns.value));
    put("privacy_unit", f.privacy_unit.value.trim());
    put("max_rows_per_unit", f.max_rows_per_unit.value);
    if (f.missing.value !== "reject") put("missing", f.missing.value);
    put("fill", f.fill.value.trim());
    put("categories", f.categories.value.trim());
    put("category_weight", f.category_weight.value);
    if (f.count.value === "custom") put("count_mu", countMu.value);
    if (f.count.value === "public") put("count_public", "true");
    submit.disabled = true;
    submit.textContent = "Uploading…";
    try {
      const ds = await api("/v1/datasets", { method: "POST", form: data });
      clearError();
      location.hash = `#/datasets/${ds.id}`;
    } catch (err) {
      showError(err, "The upload was refused");
      markInvalid(form, err.field);
      submit.disabled = false;
      submit.textContent = "Upload";
    }
  });
  main.replaceChildren(form);
}
