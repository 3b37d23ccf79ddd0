"""The console's JavaScript modules parse, and the pieces that need no page do what they say,
checked in Node (skipped without it; the browser tests then still load every module)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess

import pytest

from app.console import STATIC_DIR

MODULES = sorted(STATIC_DIR.rglob("*.js"))
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="no node on the PATH")


def _node(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    return subprocess.run(
        [NODE, "--experimental-default-type=module", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@needs_node
@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(STATIC_DIR)))
def test_every_module_parses(path) -> None:
    # Plain `node --check` takes a .js file with imports for a script and passes it unread.
    done = _node("--check", str(path))
    assert done.returncode == 0, done.stderr


@needs_node
def test_axis_ticks_are_round_and_cover_the_values() -> None:
    script = f"""
    import {{ niceTicks, tickLabel }} from "{(STATIC_DIR / "js" / "axes.js").as_uri()}";
    const out = [[-3910, 2300], [0, 1103], [0.0012, 0.0047], [-12, 12], [5, 5]].map(([lo, hi]) => {{
      const t = niceTicks(lo, hi);
      const labels = t.ticks.map((v) => tickLabel(v, t.step));
      return {{ lo, hi, ticks: t.ticks, step: t.step, labels }};
    }});
    console.log(JSON.stringify(out));
    """
    done = _node("--input-type=module", "-e", script)
    assert done.returncode == 0, done.stderr
    for case in json.loads(done.stdout):
        ticks, step = case["ticks"], case["step"]
        assert ticks[0] <= min(case["lo"], case["hi"]) and ticks[-1] >= max(case["lo"], case["hi"])
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert round(mantissa, 9) in (1, 2, 5), case
        assert all(abs(v / step - round(v / step)) < 1e-9 for v in ticks), case
    by_range = {(c["lo"], c["hi"]): c["labels"] for c in json.loads(done.stdout)}
    # The ticks were -3910, -805, 2300: now round thousands.
    assert by_range[(-3910, 2300)] == [
        "-4\u2009000",
        "-2\u2009000",
        "0",
        "2\u2009000",
        "4\u2009000",
    ]


@needs_node
def test_counts_have_their_thousands_apart_and_durations_read_in_words() -> None:
    script = f"""
    import {{ count, seconds }} from "{(STATIC_DIR / "js" / "dom.js").as_uri()}";
    console.log(JSON.stringify({{
      counts: [0, 999, 1000, 53940, 327346, 1234567.4, null].map(count),
      seconds: [0.42, 12.4, 95, 4000, 9000].map(seconds),
    }}));
    """
    done = _node("--input-type=module", "-e", script)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    thin = "\u2009"
    assert out["counts"] == [
        "0", "999", f"1{thin}000", f"53{thin}940", f"327{thin}346", f"1{thin}234{thin}567", "—",
    ]  # fmt: skip
    assert out["seconds"] == ["0.42 s", "12 s", "1.6 min", "67 min", "2.5 h"]


@needs_node
def test_a_submission_without_an_answer_is_sent_again_under_its_first_key() -> None:
    # The network fails twice, then the server refuses (409) twice, then admits twice.
    script = f"""
    globalThis.location = {{ href: "http://localhost/console/" }};
    globalThis.sessionStorage = {{ getItem: () => null }};
    const answers = ["down", "down", "down", 409, 409, 201, 201];
    const keys = [];
    globalThis.fetch = async (url, init) => {{
      keys.push(init.headers["Idempotency-Key"]);
      const answer = answers.shift();
      if (answer === "down") throw new Error("no route to host");
      const headers = {{ get: () => "application/json" }};
      const json = async () => ({{ id: keys.length }});
      return {{ ok: answer === 201, status: answer, statusText: "", headers, json }};
    }};
    const {{ idempotentSubmitter }} = await import("{(STATIC_DIR / "js" / "api.js").as_uri()}");
    const submit = idempotentSubmitter();
    const bodies = [2, 2, 3, 3, 3, 3, 3].map((k) => ({{ k }}));
    const outcomes = [];
    for (const json of bodies) {{
      outcomes.push(await submit("/v1/datasets/d/jobs", json).then((b) => b.id, (e) => e.status));
    }}
    console.log(JSON.stringify({{ keys, outcomes }}));
    """
    done = _node("--input-type=module", "-e", script)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    keys = out["keys"]
    assert out["outcomes"] == [0, 0, 0, 409, 409, 6, 7]
    assert all(key.startswith("console-") for key in keys)
    # A retry of the same body with no answer keeps its key; another body, or any body after
    # the server answered, gets a new one.
    same = [keys[i] == keys[i + 1] for i in range(len(keys) - 1)]
    assert same == [True, False, True, False, False, False]


@needs_node
def test_a_form_that_admits_work_opens_what_was_made_and_marks_what_was_refused() -> None:
    # The first submission is refused (422 naming `k`), the second admitted; a form whose body
    # is null sends nothing.
    script = f"""
    globalThis.location = {{ href: "http://localhost/console/", hash: "" }};
    globalThis.sessionStorage = {{ getItem: () => null }};
    class FakeNode {{
      constructor(tag) {{ this.tag = tag; this.children = []; this.attrs = {{}}; }}
      append(...c) {{ this.children.push(...c); }}
      replaceChildren(...c) {{ this.children = c; }}
      setAttribute(n, v) {{ this.attrs[n] = v; }}
      removeAttribute(n) {{ delete this.attrs[n]; }}
      focus() {{}}
    }}
    globalThis.Node = FakeNode;
    const alert = new FakeNode("div");
    alert.hidden = true;
    globalThis.document = {{
      createElement: (tag) => new FakeNode(tag),
      createTextNode: () => new FakeNode("#text"),
      getElementById: () => alert,
    }};
    const submit = new FakeNode("button");
    const k = new FakeNode("input");
    const seen = [];
    const answers = [
      [422, {{ title: "Invalid parameter", detail: "k: too large", field: "k" }}],
      [202, {{ id: "j1" }}],
    ];
    globalThis.fetch = async (url, init) => {{
      const path = new URL(url).pathname;
      seen.push({{ path, label: submit.textContent, disabled: submit.disabled }});
      const [status, body] = answers.shift();
      const headers = {{ get: () => "application/problem+json" }};
      return {{ ok: status < 300, status, statusText: "", headers, json: async () => body }};
    }};
    let handler = null;
    const form = {{
      addEventListener: (type, fn) => {{ handler = fn; }},
      querySelectorAll: () => Object.keys(k.attrs).length ? [k] : [],
      elements: {{ namedItem: (name) => (name === "k" ? k : null) }},
    }};
    const {{ submitsWork }} = await import("{(STATIC_DIR / "js" / "ui.js").as_uri()}");
    let bodies = [null, {{ k: 9 }}, {{ k: 2 }}];
    let refused = 0;
    submitsWork(form, submit, {{
      path: "/v1/datasets/d/jobs",
      body: () => bodies.shift(),
      page: (job) => `#/jobs/${{job.id}}`,
      failure: "The job was not submitted",
      sending: "Submitting…",
      refused: () => {{ refused += 1; submit.textContent = "Submit job"; }},
    }});
    const event = {{ preventDefault: () => {{}} }};
    const states = [];
    for (let i = 0; i < 3; i++) {{
      await handler(event);
      states.push({{ sent: seen.length, refused, alert: !alert.hidden,
        invalid: k.attrs["aria-invalid"] ?? null, hash: location.hash }});
    }}
    console.log(JSON.stringify({{ seen, states }}));
    """
    done = _node("--input-type=module", "-e", script)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    sending = {"path": "/v1/datasets/d/jobs", "label": "Submitting…", "disabled": True}
    assert out["seen"] == [sending, sending]
    assert out["states"] == [
        {"sent": 0, "refused": 0, "alert": False, "invalid": None, "hash": ""},
        {"sent": 1, "refused": 1, "alert": True, "invalid": "true", "hash": ""},
        # Admitted: the alert is cleared and the job's page opens (the form is left behind).
        {"sent": 2, "refused": 1, "alert": False, "invalid": "true", "hash": "#/jobs/j1"},
    ]
