"""A coordinator's calls to one member of a federation, over HTTP(S) with bounded timeouts.

A member is a privclust server reached at its `url` with a `member` API key. The coordinator
asks for its seat, has it join a job, sends it each release's encoded pass and takes back the
masked words, and tells it the job's end. Every call is bounded (`federation_timeout_seconds`);
an answer that is not what the member's API says (a status, a body, a vector of the wrong
length) is a `MemberError` that names the member, never a value computed from rows.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from app.kit.config import Settings
from privclust.federation.ring import word_dtype

# Test-only: transports by member URL (in-process members), instead of the network.
TRANSPORTS: dict[str, httpx.BaseTransport] = {}


@dataclass(frozen=True)
class MemberAddress:
    """Where a member is and the key the coordinator calls it with (never shown back)."""

    position: int
    url: str
    dataset_id: str
    key: str

    @property
    def name(self) -> str:
        return f"member {self.position} ({self.url})"


class MemberError(Exception):
    """A member refused, failed or could not be reached; `status` and `code` are the member's
    when it answered with a problem, else None."""

    def __init__(
        self, member: MemberAddress, detail: str, status: int | None = None, code: str | None = None
    ) -> None:
        super().__init__(f"{member.name}: {detail}")
        self.member, self.detail, self.status, self.code = member, detail, status, code


class MemberClient:
    """One member's API, as a coordinator calls it."""

    def __init__(self, member: MemberAddress, settings: Settings) -> None:
        self.member = member
        transport = TRANSPORTS.get(member.url.rstrip("/"))
        verify: Any = settings.federation_ca_file or True
        self._http = httpx.Client(
            base_url=member.url.rstrip("/"),
            headers={"Authorization": f"Bearer {member.key}"},
            timeout=httpx.Timeout(settings.federation_timeout_seconds),
            transport=transport,
            verify=verify,
        )

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, body: Any = None, ok: int = 200) -> dict[str, Any]:
        try:
            resp = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise MemberError(self.member, f"could not be reached ({type(exc).__name__})") from exc
        try:
            answer = resp.json()
        except ValueError:
            answer = None
        if resp.status_code != ok:
            problem = answer if isinstance(answer, dict) else {}
            detail = str(problem.get("detail") or f"answered {resp.status_code}")[:500]
            code = problem.get("code")
            raise MemberError(
                self.member, detail, resp.status_code, code if isinstance(code, str) else None
            )
        if not isinstance(answer, dict):
            raise MemberError(self.member, "answered something that is not a JSON object")
        return answer

    def seat(self) -> dict[str, Any]:
        return self._call("GET", "/v1/federation/seat")

    def join(self, body: dict[str, Any]) -> str:
        answer = self._call("POST", "/v1/federation/jobs", body, ok=201)
        job_id = answer.get("id")
        if not isinstance(job_id, str):
            raise MemberError(self.member, "answered a join without a job id")
        return job_id

    def release(
        self, member_job: str, index: int, body: dict[str, Any], words: int, bits: int = 64
    ) -> np.ndarray:
        """The member's masked vector for release `index`: `words` words of `bits` bits
        (uint64 or uint32, as the body asks)."""
        dtype = word_dtype(bits)
        answer = self._call("POST", f"/v1/federation/jobs/{member_job}/releases/{index}", body)
        try:
            raw = base64.b64decode(str(answer.get("words")), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise MemberError(self.member, "answered words that are not base64") from exc
        if answer.get("release") != index or len(raw) != dtype.itemsize * words:
            raise MemberError(self.member, f"answered {len(raw)} bytes, not {words} words")
        return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype)

    def finish(
        self, member_job: str, succeeded: bool, centers: list[list[float]] | None = None
    ) -> None:
        """Tell the member the job ended; a job that succeeded sends its released centres."""
        body: dict[str, Any] = {"succeeded": succeeded}
        if centers is not None:
            body["centers"] = centers
        self._call("POST", f"/v1/federation/jobs/{member_job}/finish", body)
