// The console's entry point: signing in with an API key, the hash router, the header.

import { api, ApiError, session } from "./api.js";
import { field, h } from "./dom.js";
import { clearError, showError } from "./ui.js";
import { datasetsView } from "./views/datasets.js";
import { datasetView } from "./views/dataset.js";
import { jobsView } from "./views/jobs.js";
import { jobView } from "./views/job.js";
import { sweepView } from "./views/sweep.js";
import { sweepsView } from "./views/sweeps.js";
import { uploadView } from "./views/upload.js";

const UUID = "([0-9a-fA-F-]{36})";
// [pattern, view, section highlighted in the navigation]. A new page (e.g. private summaries)
// is one more line here and one module under views/.
const ROUTES = [
  [new RegExp("^#/datasets/?$"), datasetsView, "datasets"],
  [new RegExp(`^#/datasets/${UUID}$`), datasetView, "datasets"],
  [new RegExp("^#/jobs/?(\\?.*)?$"), jobsView, "jobs"],
  [new RegExp(`^#/jobs/${UUID}$`), jobView, "jobs"],
  [new RegExp("^#/sweeps/?(\\?.*)?$"), sweepsView, "sweeps"],
  [new RegExp(`^#/sweeps/${UUID}$`), sweepView, "sweeps"],
  [new RegExp("^#/upload$"), uploadView, "upload"],
];

const main = document.getElementById("main");
let current = null; // the AbortController of the view on screen

function setHeader() {
  const me = session.me;
  document.getElementById("nav").hidden = !me;
  document.getElementById("session").hidden = !me;
  if (!me) return;
  document.getElementById("who").textContent = `${me.tenant} · ${me.role} · ${me.prefix}…`;
  for (const link of document.querySelectorAll("#nav [data-needs-role]")) {
    link.hidden = link.dataset.needsRole !== me.role;
  }
}

function highlight(section) {
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.section === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function loginView(message) {
  const input = h("input", { name: "key", type: "password", autocomplete: "off", required: true, spellcheck: "false" });
  const button = h("button", { type: "submit" }, "Sign in");
  const form = h(
    "form",
    { class: "card login", "aria-labelledby": "login-title" },
    h("h1", { id: "login-title", tabindex: "-1" }, "Sign in"),
    h("p", {}, "Enter an owner or analyst API key. It is kept in this browser tab only ",
      "(sessionStorage) and sent as ", h("code", {}, "Authorization: Bearer"), " to the same /v1 API."),
    field("API key", input),
    button,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    session.signIn(input.value.trim());
    try {
      await whoAmI();
      clearError();
      if (!location.hash || location.hash === "#/" || location.hash === "#/login") location.hash = "#/datasets";
      else render();
    } catch (err) {
      session.signOut();
      showError(err, err.status === 401 ? "That key was not accepted" : "Could not sign in");
      button.disabled = false;
      input.select();
    }
  });
  main.replaceChildren(form);
  if (message) showError(message);
  input.focus();
  document.title = "Sign in · privclust console";
}

async function whoAmI() {
  session.me = await api("/v1/me");
  setHeader();
}

function notFound() {
  main.replaceChildren(
    h("h1", { tabindex: "-1" }, "Nothing here"),
    h("p", {}, "This page does not exist. ", h("a", { href: "#/datasets" }, "Go to the datasets.")),
  );
}

// What a page of each section shows, named for a page that finds nothing.
const NOUNS = { datasets: "dataset", jobs: "job", sweeps: "sweep" };

/** A dataset, job or sweep the API does not find: say so and lead to the lists. */
function missing(section) {
  const noun = NOUNS[section] || "page";
  main.replaceChildren(
    h("h1", { tabindex: "-1" }, `No such ${noun}`),
    h("p", {}, `This key sees no ${noun} with this id: it may have been deleted, belong to `,
      "another tenant, or the link may be mistyped."),
    h("p", { class: "next" },
      ...(NOUNS[section] ? [h("a", { href: `#/${section}` }, `All ${section}`), " · "] : []),
      h("a", { href: "#/datasets" }, "Datasets"), " · ", h("a", { href: "#/jobs" }, "Jobs"), " · ",
      h("a", { href: "#/sweeps" }, "Sweeps")),
  );
}

function adminView() {
  main.replaceChildren(
    h("h1", { tabindex: "-1" }, "An admin key"),
    h("p", {}, "Admin keys manage API keys and see no datasets or jobs. Create an owner or analyst ",
      "key (", h("code", {}, "POST /v1/api-keys"), " or ", h("code", {}, "privclust keys create"),
      ") and sign in with it."),
  );
}

async function render(event) {
  const moved = event?.type === "hashchange";
  current?.abort();
  current = new AbortController();
  const { signal } = current;
  clearError();
  if (!session.key) {
    setHeader();
    loginView();
    return;
  }
  if (!session.me) {
    try {
      await whoAmI();
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) {
        session.signOut();
        setHeader();
        loginView(err);
      } else {
        showError(err, "Could not reach the API");
      }
      return;
    }
  }
  if (session.me.role === "admin") {
    adminView();
    return;
  }
  const hash = location.hash || "#/datasets";
  for (const [pattern, view, section] of ROUTES) {
    const match = hash.match(pattern);
    if (!match) continue;
    const params = match.slice(1).filter((p) => p && !p.startsWith("?"));
    highlight(section);
    main.replaceChildren(h("p", { class: "empty", role: "status" }, "Loading…"));
    try {
      await view(main, { params, signal, me: session.me });
      const heading = main.querySelector("h1");
      document.title = `${heading?.textContent || "privclust"} · privclust console`;
      if (heading && moved) {
        // Tell assistive technology that the page changed: focus its heading.
        heading.setAttribute("tabindex", "-1");
        heading.focus({ preventScroll: true });
      }
    } catch (err) {
      if (err.name === "AbortError") return;
      if (err instanceof ApiError && err.status === 401) {
        session.signOut();
        setHeader();
        loginView(err);
        return;
      }
      if (err instanceof ApiError && err.status === 404) {
        missing(section);
        return;
      }
      main.replaceChildren(h("h1", { tabindex: "-1" }, "Could not load this page"));
      showError(err);
    }
    return;
  }
  highlight(null);
  notFound();
}

document.getElementById("sign-out").addEventListener("click", () => {
  session.signOut();
  history.replaceState(null, "", "#/datasets");
  render();
});
// The skip link moves focus without touching the hash, which is the router's.
document.querySelector(".skip").addEventListener("click", (event) => {
  event.preventDefault();
  main.focus();
});
window.addEventListener("privclust:unauthorized", (event) => {
  current?.abort();
  session.signOut();
  setHeader();
  loginView(event.detail);
});
window.addEventListener("hashchange", render);
render();
