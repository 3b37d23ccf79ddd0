"""What the secure sum adds to a pass: time and bytes per member, against the central pass.

For M members (default 3, 8, 16) holding equal shares of N rows (k = d = 16 by default), one
Lloyd pass (`LloydSums`: k x d grid sums and k counts) and one PE-means vote (`VoteCounts`, a
histogram over the default population cap of 8,192 candidates), each measured as:

- central: the pass over the pooled rows in one process, then the integer release;
- federated, in process (no network yet): what the protocol adds to a pass is each member's
  noise share and masks on its exact statistic (the slowest member's: they run in parallel)
  plus the coordinator's sum; each member's pass over its own rows is the central pass's work,
  split. Also one
  member's mask alone (M - 1 X25519 agreements, HKDFs and ChaCha20 streams), and the bytes of
  its message (8 per value, 4 for a vote whose bins fit int32: `passes.ring_bits`; what goes
  over the wire before any encoding).

Prints a table (medians over --repeats); never asserts on timings.

    .venv/bin/python bench/federation.py
    .venv/bin/python bench/federation.py --rows 30000 --members 3 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import Statistic, WorkingCopy
from privclust.clustering.evolution.vote import VoteCounts
from privclust.clustering.mechanisms.lloyd import LloydSums
from privclust.federation import (
    Layout,
    MaskScope,
    MemberKey,
    MemberSeat,
    NoiseShares,
    answer_release,
    masked_contribution,
    member_mask,
    released,
)
from privclust.federation.passes import ring_bits
from privclust.privacy import noise

SENSITIVITY, SIGMA = 4.0, 10.0


def median_ms(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)


def central(rows: np.ndarray, statistic: Statistic) -> None:
    exact = WorkingCopy(rows).total(statistic)
    layout = Layout.of(exact)
    noise.integer_release(
        layout.flatten(exact), sensitivity=SENSITIVITY, sigma=SIGMA, rng=noise.secure_generator()
    )


def measure(name: str, rows: np.ndarray, statistic: Statistic, members: int, repeats: int) -> dict:
    keys = [MemberKey.generate() for _ in range(members)]
    publics = tuple(key.public for key in keys)
    shares = NoiseShares(members=members)
    seats = [MemberSeat(key=key, members=publics, shares=shares) for key in keys]
    parts = [WorkingCopy(own) for own in np.array_split(rows, members)]
    scope = MaskScope("bench", "job", 0, 0)
    # The ring the coordinator asks for (a vote's bins in 32-bit words: N stands as N~).
    bits = ring_bits(statistic, [Gaussian(SENSITIVITY, SIGMA)], len(rows), 1)
    exact = [part.total(statistic) for part in parts]
    layout = Layout.of(exact[0])
    messages: dict = {}

    def protocol_part(i: int) -> None:
        # What the protocol adds to member i's pass: its noise share and its masks.
        flat = layout.flatten(exact[i])
        share = shares.share(i, flat.shape, sensitivity=SENSITIVITY, sigma=SIGMA)
        messages[i] = masked_contribution(flat, share, keys[i], publics, scope, bits)

    central(rows, statistic)  # compiles the pass's kernels before anything is timed
    central_ms = median_ms(lambda: central(rows, statistic), repeats)
    member_ms = max(median_ms(lambda i=i: protocol_part(i), repeats) for i in range(members))
    # The member's entry point gives the same message layout (checked once, not timed).
    assert (
        answer_release(parts[0], statistic, seats[0], scope, sensitivity=1.0, sigma=1.0)[0]
        == layout
    )
    sent = [messages[i] for i in range(members)]
    sum_ms = median_ms(lambda: released(sent, layout, members), repeats)
    mask_ms = median_ms(lambda: member_mask(keys[0], publics, scope, layout.size, bits), repeats)
    return {
        "pass": name,
        "M": members,
        "central pass ms": central_ms,
        "mask ms": mask_ms,
        "sum ms": sum_ms,
        "overhead ms": member_ms + sum_ms,
        "bytes/member": int(sent[0].nbytes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--d", type=int, default=16)
    parser.add_argument("--candidates", type=int, default=8192)
    parser.add_argument("--members", type=int, nargs="+", default=[3, 8, 16])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = rng.uniform(-1.0, 1.0, size=(args.rows, args.d))
    passes = {
        "lloyd": LloydSums(rng.uniform(-0.5, 0.5, size=(args.k, args.d)), 0.5),
        "vote": VoteCounts(rng.uniform(-0.5, 0.5, size=(args.candidates, args.d))),
    }
    print(
        f"N = {args.rows:,} rows, k = {args.k}, d = {args.d}, vote over {args.candidates:,} "
        f"candidates; medians of {args.repeats}; load average {os.getloadavg()[0]:.2f}"
    )
    header = ["pass", "M", "central pass ms", "mask ms", "sum ms", "overhead ms", "bytes/member"]
    print(" | ".join(header))
    for members in args.members:
        for name, statistic in passes.items():
            row = measure(name, rows, statistic, members, args.repeats)
            print(
                " | ".join(
                    f"{row[h]:.2f}" if isinstance(row[h], float) else str(row[h]) for h in header
                )
            )


if __name__ == "__main__":
    main()
