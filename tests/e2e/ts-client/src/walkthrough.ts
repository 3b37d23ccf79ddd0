// The README walk-through, step by step, through a client generated from /openapi.json:
// openapi-fetch typed by the generated `paths` (generated/privclust.ts, made by generate.mjs).
// Every call, body and answer is checked by the TypeScript compiler against the served
// document; what the server answers is checked here at run time. Prints one JSON summary line.
//
// Environment: PRIVCLUST (the API's base URL), PRIVCLUST_ADMIN (an admin key).
import assert from "node:assert/strict";
import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "../generated/privclust.js";

type Job = components["schemas"]["JobOut"];
type Sweep = components["schemas"]["SweepOut"];
type Problem = components["schemas"]["Problem"];
type UploadForm = NonNullable<
  paths["/v1/datasets"]["post"]["requestBody"]
>["content"]["multipart/form-data"];

const BASE = process.env.PRIVCLUST ?? "http://127.0.0.1:8000";
const ADMIN = process.env.PRIVCLUST_ADMIN ?? "";
const POLL_SECONDS = Number(process.env.POLL_SECONDS ?? "300");
const FINISHED = new Set(["succeeded", "failed", "cancelled"]);

function client(key: string): Client<paths> {
  return createClient<paths>({ baseUrl: BASE, headers: { Authorization: `Bearer ${key}` } });
}

/** The answer's data, or a failed assertion naming the problem the API sent. */
function ok<T>(answer: { data?: T; error?: unknown; response: Response }, what: string): T {
  assert.ok(answer.data !== undefined, `${what}: HTTP ${answer.response.status} ${JSON.stringify(answer.error)}`);
  return answer.data;
}

// The README's step 2: 3,000 customers in three segments, four columns in very different units
// (age in years, income in thousands, visits a month, spend a year); seeded, so runs are alike.
const SEGMENTS: number[][] = [[30, 50, 5, 200], [45, 120, 15, 500], [65, 80, 25, 800]];
const SPREAD = [5, 10, 1.5, 50];

function customersCsv(n = 3000): string {
  let state = 7;
  const uniform = () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const gauss = (mean: number, sd: number) =>
    mean + sd * Math.sqrt(-2 * Math.log(1 - uniform())) * Math.cos(2 * Math.PI * uniform());
  const lines = ["age,income_k,visits,spend"];
  for (let i = 0; i < n; i++) {
    const segment = SEGMENTS[i % 3]!;
    lines.push(segment.map((m, j) => gauss(m, SPREAD[j]!).toFixed(2)).join(","));
  }
  return lines.join("\n") + "\n";
}

/** A multipart body from the generated form type (every value a string or a Blob). */
function multipart(form: UploadForm): FormData {
  const data = new FormData();
  for (const [name, value] of Object.entries(form)) {
    if (value === undefined || value === null) continue;
    data.append(name, value instanceof Blob ? value : String(value));
  }
  return data;
}

async function pollJob(api: Client<paths>, id: string): Promise<Job> {
  for (let i = 0; i < POLL_SECONDS; i++) {
    const job = ok(await api.GET("/v1/jobs/{job_id}", { params: { path: { job_id: id } } }), "job");
    if (FINISHED.has(job.status)) return job;
    await new Promise((r) => setTimeout(r, 1000));
  }
  throw new Error(`job ${id} is not done after ${POLL_SECONDS} s: is a worker running?`);
}

async function pollSweep(api: Client<paths>, id: string): Promise<Sweep> {
  for (let i = 0; i < POLL_SECONDS; i++) {
    const sweep = ok(
      await api.GET("/v1/sweeps/{sweep_id}", { params: { path: { sweep_id: id } } }),
      "sweep",
    );
    if (FINISHED.has(sweep.status)) return sweep;
    await new Promise((r) => setTimeout(r, 1000));
  }
  throw new Error(`sweep ${id} is not done after ${POLL_SECONDS} s`);
}

async function main(): Promise<void> {
  // 1. The admin creates an owner key and an analyst key for tenant "acme".
  const admin = client(ADMIN);
  const newKey = async (role: "owner" | "analyst") =>
    ok(await admin.POST("/v1/api-keys", { body: { tenant: "acme", role } }), `${role} key`).key;
  const owner = client(await newKey("owner"));
  const analyst = client(await newKey("analyst"));

  // 2 and 3. The owner uploads the table with its public domain declared per column (as
  // comma-separated numbers, as the README's curl sends them) and a total budget.
  const form: UploadForm = {
    file: new Blob([customersCsv()], { type: "text/csv" }),
    name: "customers",
    epsilon: 3,
    delta: 1e-6,
    lower: "0,0,0,0",
    upper: "100,200,30,1000",
  };
  const dataset = ok(
    await owner.POST("/v1/datasets", { body: form, bodySerializer: multipart }),
    "upload",
  );
  assert.equal(dataset.n_rows, 3000); // the owner's view has the exact count
  assert.equal(dataset.domain.kind, "box");

  // The analyst sees the noisy count and never the exact one.
  const path = { dataset_id: dataset.id };
  const seen = ok(await analyst.GET("/v1/datasets/{dataset_id}", { params: { path } }), "view");
  assert.equal(seen.n_rows, null);
  assert.equal(seen.n_rows_dp, dataset.n_rows_dp);

  // 4. The analyst prices a job and reads how accurate its centres will be, asks which epsilon
  // meets 1% of each column's range, then submits; a retry with the same key is the same job.
  const body = { algorithm: "auto", k: 3, epsilon: 1 } as const;
  const estimate = ok(
    await analyst.POST("/v1/datasets/{dataset_id}/jobs/estimate", { params: { path }, body }),
    "estimate",
  );
  assert.ok(estimate.admissible);
  assert.ok(estimate.accuracy);
  const target = ok(
    await analyst.POST("/v1/datasets/{dataset_id}/jobs/estimate", {
      params: { path },
      body: { k: 3, target_centre_std_fraction: 0.01 },
    }),
    "target estimate",
  );
  const header = { "Idempotency-Key": `ts-walkthrough-${dataset.id}` };
  const submit = () =>
    analyst.POST("/v1/datasets/{dataset_id}/jobs", { params: { path, header }, body });
  const first = await submit();
  const submitted = ok(first, "submit");
  assert.equal(first.response.status, 202);
  const again = await submit();
  assert.equal(ok(again, "retry").id, submitted.id);
  assert.equal(again.response.headers.get("Idempotent-Replayed"), "true");

  // 5. Poll until it is done, then read the centres.
  const job = await pollJob(analyst, submitted.id);
  assert.equal(job.status, "succeeded", JSON.stringify(job));
  assert.ok(job.result);
  assert.deepEqual(job.result.columns, ["age", "income_k", "visits", "spend"]);

  // 6. What is left of the budget, and the ledger behind it.
  const budget = ok(await analyst.GET("/v1/datasets/{dataset_id}/budget", { params: { path } }), "budget");
  const ledger = ok(await analyst.GET("/v1/datasets/{dataset_id}/ledger", { params: { path } }), "ledger");
  assert.equal(budget.jobs, 1);

  // The centres as a flat table (JSON rows; CSV with ?format=csv), the same numbers.
  const jobPath = { job_id: job.id };
  const rows = ok(await analyst.GET("/v1/jobs/{job_id}/centres", { params: { path: jobPath } }), "centres");
  assert.ok(Array.isArray(rows));
  assert.deepEqual(
    rows.map((r) => r.centre),
    job.result.centers.map((_, i) => i),
  );
  assert.equal(rows[0]?.["age"], job.result.centers[0]?.[0]);

  // The owner caps the analyst's key on this dataset, reads the cap back, and lifts it.
  const me = ok(await analyst.GET("/v1/me", {}), "me");
  const capPath = { dataset_id: dataset.id, key_id: me.id };
  const capped = ok(
    await owner.PUT("/v1/datasets/{dataset_id}/budget/keys/{key_id}", {
      params: { path: capPath },
      body: { mu: 2, pace: { period: "week", mu: 1 } },
    }),
    "key cap",
  );
  assert.equal(capped.jobs, 1);
  assert.equal(capped.pace?.period, "week");
  const lifted = ok(
    await owner.DELETE("/v1/datasets/{dataset_id}/budget/keys/{key_id}", { params: { path: capPath } }),
    "lift",
  );
  assert.equal(lifted.mu_cap, capped.mu_cap);

  // Over the remaining budget: 409, parsed as the generated Problem type.
  const greedy = await analyst.POST("/v1/datasets/{dataset_id}/jobs", {
    params: { path },
    body: { k: 3, epsilon: budget.epsilon_remaining + 0.5 },
  });
  assert.equal(greedy.response.status, 409);
  const problem: Problem | undefined = greedy.error;
  assert.equal(problem?.code, "budget-exceeded");

  // 7 to 9. A sweep over k, a job's private sizes, and the owner's labels (404 for analysts).
  const sweepBody = { ks: [2, 3, 4], epsilon: 2 };
  const sweepEstimate = ok(
    await analyst.POST("/v1/datasets/{dataset_id}/sweeps/estimate", { params: { path }, body: sweepBody }),
    "sweep estimate",
  );
  const started = ok(
    await analyst.POST("/v1/datasets/{dataset_id}/sweeps", { params: { path }, body: sweepBody }),
    "sweep",
  );
  const sweep = await pollSweep(analyst, started.id);
  assert.equal(sweep.status, "succeeded", JSON.stringify(sweep));
  const k3 = sweep.jobs.find((j) => j.k === 3);
  assert.ok(k3);
  const summarised = ok(
    await analyst.GET("/v1/jobs/{job_id}", { params: { path: { job_id: k3.job_id } } }),
    "sweep job",
  );
  const labels = await owner.GET("/v1/jobs/{job_id}/labels", {
    params: { path: { job_id: k3.job_id } },
    parseAs: "text",
  });
  const hidden = await analyst.GET("/v1/jobs/{job_id}/labels", {
    params: { path: { job_id: k3.job_id } },
    parseAs: "text",
  });

  console.log(
    JSON.stringify({
      dataset: {
        id: dataset.id,
        n_rows_dp: seen.n_rows_dp,
        analyst_n_rows: seen.n_rows,
        domain: seen.domain,
      },
      estimate: estimate.privacy,
      accuracy: estimate.accuracy,
      target: { epsilon: target.privacy.epsilon, accuracy: target.accuracy },
      job: {
        id: job.id,
        algorithm: job.algorithm,
        centers: job.result.centers,
        mu: job.privacy.mu,
        warnings: job.result.warnings ?? [],
      },
      replayed: again.response.headers.get("Idempotent-Replayed"),
      budget,
      ledger_kinds: ledger.entries.map((e) => e.kind),
      refused: { status: greedy.response.status, code: problem?.code },
      sweep: {
        jobs: sweep.jobs.length,
        estimate_jobs: sweepEstimate.jobs.length,
        suggested_k: sweep.suggested_k,
        sizes: summarised.result?.sizes ?? null,
      },
      labels: { owner_status: labels.response.status, lines: (labels.data ?? "").trim().split("\n").length },
      analyst_labels_status: hidden.response.status,
    }),
  );
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.stack ?? err.message : err);
  process.exit(1);
});
