// The console's only way to the server: the same /v1 API, with the key kept in sessionStorage.

const KEY_NAME = "privclust.apiKey";
// The console is served at <root>/console/; the API lives at <root>/v1. Resolving against the
// page keeps both working behind a reverse proxy that adds a path prefix.
const API_ROOT = new URL("../", new URL(".", location.href));

export const session = {
  me: null, // the calling key as GET /v1/me returns it: {id, tenant, role, prefix, ...}
  get key() {
    return sessionStorage.getItem(KEY_NAME);
  },
  signIn(key) {
    sessionStorage.setItem(KEY_NAME, key);
  },
  signOut() {
    sessionStorage.removeItem(KEY_NAME);
    this.me = null;
  },
};

/** An error answer from the API: `problem` is its RFC 9457 problem document. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }

  /** The form field the problem names (422 `invalid-parameter`), if any. */
  get field() {
    return this.problem.field || null;
  }
}

/**
 * Call the API. `json` sends a JSON body, `form` a FormData (multipart). Resolves to the decoded
 * body; rejects with an ApiError carrying the problem document (status 0: no answer at all).
 */
export async function api(path, { method = "GET", json, form, headers = {}, signal } = {}) {
  const init = { method, signal, headers: { Accept: "application/json", ...headers } };
  if (session.key) init.headers.Authorization = `Bearer ${session.key}`;
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  } else if (form !== undefined) {
    init.body = form; // the browser sets the multipart boundary
  }
  let response;
  try {
    response = await fetch(new URL(path.replace(/^\//, ""), API_ROOT), init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, {
      title: "Service unreachable",
      detail: "the privclust API did not answer; is the service running?",
    });
  }
  const type = response.headers.get("content-type") || "";
  const body = type.includes("json") ? await response.json().catch(() => null) : null;
  if (!response.ok) {
    throw new ApiError(response.status, body || { title: response.statusText });
  }
  return body;
}

/**
 * A non-JSON body (e.g. the owner's labels CSV) as a Blob, sent with the same key in the
 * Authorization header; errors as for api().
 */
export async function fetchBlob(path, { signal } = {}) {
  const headers = session.key ? { Authorization: `Bearer ${session.key}` } : {};
  let response;
  try {
    response = await fetch(new URL(path.replace(/^\//, ""), API_ROOT), { headers, signal });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, { title: "Service unreachable", detail: "the privclust API did not answer" });
  }
  if (!response.ok) {
    const type = response.headers.get("content-type") || "";
    const body = type.includes("json") ? await response.json().catch(() => null) : null;
    throw new ApiError(response.status, body || { title: response.statusText });
  }
  return response.blob();
}

/** Hand a Blob to the browser as a file download named `name`. */
export function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  a.hidden = true;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** Query string from an object, leaving out null and undefined values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined) q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
}

/** A fresh Idempotency-Key (crypto.randomUUID needs a secure context; this does not). */
export function idempotencyKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return "console-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * A form's submissions (POST `json` to `path`) under an Idempotency-Key: a submission that got
 * no answer (the network failed) is sent again with the same body under the key it first went
 * with, so that the server admits it once; once the server answered, the next one is new.
 */
export function idempotentSubmitter() {
  let pending = null; // {body, key}: a submission that got no answer
  return async (path, json) => {
    const text = JSON.stringify(json);
    const key = pending && pending.body === text ? pending.key : idempotencyKey();
    pending = { body: text, key };
    try {
      const created = await api(path, { method: "POST", json, headers: { "Idempotency-Key": key } });
      pending = null;
      return created;
    } catch (err) {
      if (err.status) pending = null; // the server answered: a retry is a new submission
      throw err;
    }
  };
}

let openapi = null;

/**
 * A schema of the API's own /openapi.json (fetched once): the console takes its vocabulary
 * (the algorithms and what each does) from the document the server publishes, never from a
 * copy. Null when it cannot be read.
 */
export async function apiSchema(name) {
  openapi ??= fetch(new URL("openapi.json", API_ROOT), { headers: { Accept: "application/json" } })
    .then((r) => (r.ok ? r.json() : null))
    .catch(() => null);
  const doc = await openapi;
  return doc?.components?.schemas?.[name] ?? null;
}
