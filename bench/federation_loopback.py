"""The secure sum through the service, on loopback HTTP: what a federated pass costs against the
central pass, and the bytes each member sends and receives.

One privclust API (this process, uvicorn on 127.0.0.1, SQLite in a temporary directory) holds
M member datasets of N/M rows each (k = d = 16 by default) and a member key for each; a
`FederatedJob` (app.coordinator.service) calls them as a coordinator does, over real HTTP.
Measured per pass, for one Lloyd pass (`JointLloydSums`: k x d grid sums and k counts) and one
PE-means vote (`VoteCounts` over 8,192 candidates: k anchors and their Levy variations, as
PE-means votes after its first iteration):

- central: the pass over the pooled rows in one process, then the integer release;
- federated: the coordinator's `release` (every member, in parallel threads: decode the pass,
  read and prepare its rows, compute, draw its share, mask, store its answer; the coordinator
  adds the vectors up). The members share this machine's cores, so their passes are not run
  in parallel as on M hosts;
- bytes per member: the request (the encoded pass and noises, JSON: a vote's candidates as
  their recipe) and the answer (the masked words, base64 in JSON: 4 bytes a bin for a vote
  whose bins fit int32 by `ring_bits`, the dataset's N rows standing as the public count).

A third row, `vote-whole`, sends the same vote as it travelled before its recipe: the
candidates whole (float64 in base64) and the answer in 64-bit words, for a ratio within one
run. Prints a table (medians over --repeats; bytes per member, request and answer, as httpx
and the API write them); never asserts on timings.

    .venv/bin/python bench/federation_loopback.py
    .venv/bin/python bench/federation_loopback.py --rows 30000 --members 3 --repeats 3
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(data_dir: Path) -> tuple[str, str]:
    """The API in a thread; (its URL, an admin key)."""
    os.environ.update(
        PRIVCLUST_DATA_DIR=str(data_dir),
        PRIVCLUST_DATABASE_URL=f"sqlite:///{data_dir / 'bench.db'}",
        PRIVCLUST_MAX_UPLOAD_BYTES=str(1 << 30),
        PRIVCLUST_LEDGER_CHECK_SECONDS="0",
    )
    import uvicorn

    from app.commands.migrate import migrate_and_bootstrap
    from app.kit.config import get_settings
    from app.main import create_app

    get_settings.cache_clear()
    settings = get_settings()
    admin = migrate_and_bootstrap(settings)
    assert admin is not None
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", admin


def _members(base: str, admin: str, parts: list[np.ndarray]) -> list[dict[str, str]]:
    d = parts[0].shape[1]
    header = ",".join(f"c{j}" for j in range(d))
    out = []
    with httpx.Client(base_url=base, timeout=600) as http:
        auth = {"Authorization": f"Bearer {admin}"}
        owner = http.post(
            "/v1/api-keys", headers=auth, json={"tenant": "bench", "role": "owner"}
        ).json()["key"]
        for rows in parts:
            text = header + "\n" + "\n".join(",".join(f"{v:.5f}" for v in r) for r in rows)
            made = http.post(
                "/v1/datasets",
                headers={"Authorization": f"Bearer {owner}"},
                data={"name": "part", "epsilon": "200", "delta": "1e-6", "radius": "4"},
                files={"file": ("part.csv", io.BytesIO(text.encode()), "text/csv")},
            ).json()
            key = http.post(
                "/v1/api-keys",
                headers=auth,
                json={"tenant": "bench", "role": "member", "dataset_id": made["id"]},
            ).json()["key"]
            seat = http.get("/v1/federation/seat", headers={"Authorization": f"Bearer {key}"})
            out.append({"dataset": made["id"], "key": key, "public": seat.json()["public_key"]})
    return out


def _median(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=30_000)
    parser.add_argument("--members", type=int, nargs="+", default=[3, 8, 16])
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--d", type=int, default=16)
    parser.add_argument("--candidates", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from app.coordinator.client import MemberAddress
    from app.coordinator.service import FederatedJob, Federation
    from privclust.clustering.data.release import Gaussian
    from privclust.clustering.data.rows import Reading, WorkingCopy
    from privclust.clustering.evolution.nearest import GroupLayout
    from privclust.clustering.evolution.variation import Variations
    from privclust.clustering.evolution.vote import VoteCounts
    from privclust.clustering.mechanisms.grid import grid_sensitivity
    from privclust.clustering.mechanisms.lloyd import JointLloydSums, LloydSums
    from privclust.privacy import noise

    rng = np.random.default_rng(0)
    pooled = rng.normal(0.0, 1.0, size=(args.rows, args.d))
    pooled = np.round(pooled, 5)  # as the CSV carries them
    centres = rng.normal(0.0, 1.0, size=(args.k, args.d))
    # A vote as PE-means makes it after its first: k anchors (the last selection) and their
    # Levy variations, which travel as their recipe.
    per = args.candidates // args.k - 1
    recipe, candidates = Variations.draw(centres, per, 4.0, noise.variation_generator(rng))
    multiplier = 7
    passes = {
        "lloyd": (
            JointLloydSums(LloydSums(centres, 1.0), multiplier),
            [Gaussian(float(np.hypot(grid_sensitivity(args.d), multiplier)), 50.0)],
            "float64",
        ),
        "vote": (
            VoteCounts(candidates, GroupLayout(anchors=args.k, per_anchor=per), recipe),
            [Gaussian(1.0, 50.0)],
            "float32",
        ),
    }
    passes["vote-whole"] = passes["vote"]
    domain = {
        "columns": [f"c{j}" for j in range(args.d)], "domain_kind": "ball", "radius": 4.0,
        "center": [0.0] * args.d, "lower": None, "upper": None, "table_spec": None,
    }  # fmt: skip
    print(f"N = {args.rows}, k = {args.k}, d = {args.d}, {args.candidates} candidates")
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("pass        M  central_ms  federated_ms  overhead_ms  request_B  answer_B  both_B")
    with tempfile.TemporaryDirectory() as tmp:
        base, admin = _serve(Path(tmp))
        from app.kit.config import get_settings

        settings = get_settings()
        for m in args.members:
            members = _members(base, admin, np.array_split(pooled, m))
            addresses = tuple(
                MemberAddress(i, base, x["dataset"], x["key"]) for i, x in enumerate(members)
            )
            federation = Federation(f"bench-{m}", addresses, tuple(x["public"] for x in members), 0)
            for name, (statistic, noises, dtype) in passes.items():
                reading = Reading(radius=4.0, center=np.zeros(args.d), dtype=dtype)
                central_rows = WorkingCopy(reading.prepare(pooled))
                central = _median(
                    lambda rows=central_rows, s=statistic, n=noises: rows.release(
                        s, n, np.random.default_rng()
                    ),
                    args.repeats,
                )
                job = FederatedJob(
                    federation, f"{name}-{m}", "pe-lloyd", 3.0, dtype, domain, settings
                )
                # "vote-whole": the wire form before the recipe and the 32-bit ring, to compare.
                whole = name.endswith("whole")
                n_public = None if whole else args.rows
                job.whole = set(range(m)) if whole else set()
                job.join()
                federated = _median(
                    lambda j=job, s=statistic, n=noises, p=n_public: j.release(s, n, p),
                    args.repeats,
                )
                job.finish(succeeded=True)
                job.close()
                request, answer = _bytes(statistic, noises, n_public, whole)
                print(
                    f"{name:10s} {m:2d} {central * 1e3:11.1f} {federated * 1e3:13.1f} "
                    f"{(federated - central) * 1e3:12.1f} {request:10d} {answer:9d} "
                    f"{request + answer:8d}"
                )


def _bytes(statistic, noises, n_public: int | None, whole: bool) -> tuple[int, int]:
    """A member's request and answer in bytes, as httpx and the API write them (compact JSON)."""
    from privclust.federation.passes import encode, ring_bits
    from privclust.federation.pricing import encode_noises

    bits = ring_bits(statistic, noises, n_public, 1)
    body = {"pass": encode(statistic, whole=whole), "noises": encode_noises(noises), "bits": bits}
    raw = _answer_words(statistic) * bits // 8
    answer = {"release": 0, "words": "x" * (4 * -(-raw // 3))}
    return len(json.dumps(body, separators=(",", ":"))), len(
        json.dumps(answer, separators=(",", ":"))
    )


def _answer_words(statistic: object) -> int:
    from privclust.federation.passes import layout_of

    return sum(int(np.prod(shape)) for shape in layout_of(statistic))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
