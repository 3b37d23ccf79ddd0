"""A coordinator's federation: its members, each job's calls to all of them, and the secure sum.

The coordinator holds no row. For each job it has every member join (each charges the job on
its own ledger), sends each release's encoded pass to every member, adds the masked vectors
modulo 2^64 (privclust.federation.protocol.released: the exact pooled statistic plus the
members' noise shares) and tells every member the job's end. It sees nothing else of a member.
A member that refuses to join is named and every member that had joined is told the job ended
(each refunds, having answered nothing); a member that fails mid-job fails the job.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.coordinator.client import MemberAddress, MemberClient, MemberError
from app.kit.config import Settings
from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import Statistic
from privclust.federation.passes import encode, layout_of, ring_bits
from privclust.federation.pricing import encode_noises
from privclust.federation.protocol import released
from privclust.federation.ring import Layout

# Test-only: called with every masked vector the coordinator receives (the recorded view).
RECEIVED: list[Callable[[int, np.ndarray], None]] = []


@dataclass(frozen=True)
class Federation:
    """A federated dataset's members (in the federation's public order), their public keys
    (base64) and c, the colluding members it tolerates. `name` scopes every mask (the
    coordinator's dataset id)."""

    name: str
    members: tuple[MemberAddress, ...]
    publics: tuple[str, ...]
    colluding: int


@dataclass
class FederatedJob:
    """One job's calls to every member of `federation`: `join`, then each `release` in order
    (numbered from 0), then `finish`."""

    federation: Federation
    job: str
    method: str
    mu: float
    dtype: str
    domain: dict[str, Any]
    settings: Settings
    member_jobs: list[str] = field(default_factory=list)
    releases: int = 0
    # The members that are sent a vote's candidates whole (they drew others from the recipe).
    whole: set[int] = field(default_factory=set)
    # Called with `states()` after each change of a member's status (the job's record).
    observer: Callable[[list[dict[str, Any]]], None] | None = None

    def __post_init__(self) -> None:
        members = self.federation.members
        self._clients = [MemberClient(m, self.settings) for m in members]
        self._pool = ThreadPoolExecutor(max_workers=len(members), thread_name_prefix="member")
        self._status = ["pending"] * len(members)
        self._answered = [0] * len(members)

    def states(self) -> list[dict[str, Any]]:
        """Each member's part in the job, from public facts only: its position, `status`
        (pending: not asked yet; joined; answered: it answered `releases` releases; finished:
        told the job's end; refused: it refused to join; failed: it failed a call mid-job)
        and the releases it answered. Never a statistic, a share or a count of its rows."""
        return [
            {"position": i, "status": status, "releases": answered}
            for i, (status, answered) in enumerate(zip(self._status, self._answered, strict=True))
        ]

    def _changed(self) -> None:
        if self.observer is not None:
            self.observer(self.states())

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for client in self._clients:
            client.close()

    def _each(self, call: Callable[[int, MemberClient], Any]) -> list[Any]:
        """`call` on every member at once; the first member (in order) that failed is raised."""
        futures = [self._pool.submit(call, i, c) for i, c in enumerate(self._clients)]
        results, failed = [], None
        for future in futures:
            try:
                results.append(future.result())
            except MemberError as exc:
                failed = failed or exc
                results.append(None)
        if failed is not None:
            raise failed
        return results

    def join(self) -> None:
        """Every member joins (and charges) the job, or none stays joined: on a refusal the
        members that joined are told the job ended (each refunds, having answered nothing) and
        the refusal is raised, naming its member."""
        body = {
            "federation": self.federation.name,
            "job": self.job,
            "method": self.method,
            "mu": self.mu,
            "dtype": self.dtype,
            "members": list(self.federation.publics),
            "colluding": self.federation.colluding,
            "domain": self.domain,
        }
        joined: dict[int, str] = {}

        def one(i: int, client: MemberClient) -> str:
            try:
                joined[i] = client.join(body)
            except MemberError:
                self._status[i] = "refused"
                raise
            self._status[i] = "joined" if self._answered[i] == 0 else "answered"
            return joined[i]

        try:
            self.member_jobs = self._each(one)
        except MemberError:
            for i, member_job in joined.items():
                # It answered nothing: told or not, its charge is its own to refund.
                with contextlib.suppress(MemberError):
                    self._clients[i].finish(member_job, succeeded=False)
                    self._status[i] = "finished"
            raise
        finally:
            self._changed()

    def release(
        self, statistic: Statistic, noises: Sequence[Gaussian], n_public: int | None = None
    ) -> tuple[np.ndarray, ...]:
        """The release of `statistic` with `noises`, as the central engine's `Rows.release`
        gives it: every member's masked vector, added up. `n_public` (the dataset's N~) lets a
        vote be summed in 32-bit words (`passes.ring_bits`)."""
        if not self.member_jobs:
            raise RuntimeError("the members have not joined this job")
        index, self.releases = self.releases, self.releases + 1
        bits = ring_bits(statistic, noises, n_public, self.federation.colluding + 1)
        body = {"pass": encode(statistic), "noises": encode_noises(noises), "bits": bits}
        layout = Layout(layout_of(statistic))

        def one(i: int, client: MemberClient) -> np.ndarray:
            try:
                words = self._answer(i, client, index, statistic, body, layout.size)
            except MemberError:
                self._status[i] = "failed"
                raise
            self._status[i], self._answered[i] = "answered", self._answered[i] + 1
            return words

        try:
            messages = self._each(one)
        finally:
            self._changed()
        for i, message in enumerate(messages):
            for hook in RECEIVED:
                hook(i, message)
        return released(messages, layout, len(messages))

    def _answer(
        self,
        i: int,
        client: MemberClient,
        index: int,
        statistic: Statistic,
        body: dict[str, Any],
        words: int,
    ) -> np.ndarray:
        """Member i's masked vector: from the vote's recipe, or its candidates whole to a member
        that drew others from the recipe (it refused with `candidates-differ`, nothing charged,
        and gets them whole from then on)."""
        member_job, bits = self.member_jobs[i], int(body["bits"])
        if i not in self.whole:
            try:
                return client.release(member_job, index, body, words, bits)
            except MemberError as exc:
                if exc.code != "candidates-differ":
                    raise
                self.whole.add(i)
        whole = body | {"pass": encode(statistic, whole=True)}
        return client.release(member_job, index, whole, words, bits)

    def finish(self, succeeded: bool, centers: list[list[float]] | None = None) -> None:
        """Tell every member the job ended (best effort: a member that is gone keeps its
        charge, or refunds it when it answered nothing, on its own); a job that succeeded
        sends its released centres (public), from which each member's owner labels its rows."""
        for i, (client, member_job) in enumerate(
            zip(self._clients, self.member_jobs, strict=False)
        ):
            with contextlib.suppress(MemberError):
                client.finish(member_job, succeeded, centers)
                if self._status[i] != "failed":
                    self._status[i] = "finished"
        self._changed()


def seat_of(member: MemberAddress, settings: Settings) -> dict[str, Any]:
    """A member's seat (its dataset's public metadata and its public key), checked: MemberError
    naming it when it cannot be reached, its key is refused or it serves another dataset."""
    client = MemberClient(member, settings)
    try:
        seat = client.seat()
    finally:
        client.close()
    dataset = seat.get("dataset")
    if not isinstance(dataset, dict) or dataset.get("id") != member.dataset_id:
        raise MemberError(member, "its key serves another dataset than the one named", 422)
    try:
        public = base64.b64decode(str(seat.get("public_key")), validate=True)
    except ValueError as exc:
        raise MemberError(member, "its seat has no valid public key", 422) from exc
    if len(public) != 32:
        raise MemberError(member, "its seat has no valid public key", 422)
    return seat
