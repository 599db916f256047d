"""Jobs: what a call leaves running with ``leftovers='keep'``, or a call
started with ``background=True``. They live in the server (its supervisor's
jobs), each with a ring buffer of its recent output, until they end by
themselves, are stopped, or the server stops (when this client goes away,
however it goes)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, cast

from ._connection import Connection
from ._errors import ProcTreeError
from ._types import CleanupReport, JobInfo, JobOutput, Listener
from ._util import ms

UNKNOWN_JOB = "ERR_PROCTREE_UNKNOWN_JOB"


def _output(answer: Dict[str, Any]) -> JobOutput:
    return {"text": answer["text"], "from": answer["from"], "next": answer["next"], "dropped": answer["dropped"], "total": answer["total"]}


class Job:
    """A job of the server, by its id (``result.job_id``, ``call.job_id``,
    ``pt.jobs()[i]["id"]``; also the ID column of ``proctree ps``). Making
    one asks nothing of the server: a wrong id fails on use with
    ``ERR_PROCTREE_UNKNOWN_JOB``."""

    def __init__(self, conn: Connection, job_id: str) -> None:
        self._conn = conn
        self.id = job_id

    async def read(self, from_: int = 0, max_bytes: Optional[int] = None) -> JobOutput:
        """Its output (stdout and stderr merged) from byte offset ``from_``
        (0: the oldest byte still held), at most ``max_bytes``. Pass
        ``out["next"]`` back to read only what came since; ``out["dropped"]``
        says what the ring buffer lost in between."""
        fields: Dict[str, Any] = {"job": self.id, "from": from_}
        if max_bytes is not None:
            fields["maxBytes"] = max_bytes
        return _output(await self._conn.request("jobRead", **fields))

    async def tail(self, n: int = 4096) -> JobOutput:
        """The last ``n`` bytes of its output (fewer, to keep characters whole)."""
        return _output(await self._conn.request("jobTail", job=self.id, bytes=n))

    async def stop(self, grace: Optional[float] = None) -> CleanupReport:
        """Stops its whole tree (signal, ``grace`` seconds, SIGKILL) and returns the report."""
        fields: Dict[str, Any] = {"job": self.id}
        if grace is not None:
            fields["grace"] = ms(grace)
        return cast(CleanupReport, (await self._conn.request("jobStop", **fields))["report"])

    async def pause(self) -> bool:
        """Freezes the job's whole tree until ``resume()``; returns once the
        kernel shows it (True: paused). ``stop()`` still works."""
        return bool((await self._conn.request("jobPause", job=self.id))["paused"])

    async def resume(self) -> bool:
        """Thaws what ``pause()`` froze; returns once the kernel shows it (False: running)."""
        return bool((await self._conn.request("jobResume", job=self.id))["paused"])

    async def ports(self) -> List[Listener]:
        """What the job's tree listens on now; [] once it is gone."""
        return cast(List[Listener], (await self._conn.request("jobPorts", job=self.id))["ports"])

    async def wait(self) -> JobInfo:
        """Waits until its tree is gone and its output drained; returns its final info.

        Cancelling the task that waits (``asyncio.wait_for``,
        ``asyncio.timeout``, ``task.cancel()``) does **not** stop the job,
        unlike cancelling ``run()`` or ``Call.wait()``: a job is what was
        meant to outlive the command that started it, and waiting on it only
        watches. Stop it with ``stop()``.
        """
        return cast(JobInfo, (await self._conn.request("jobWait", job=self.id))["job"])

    async def info(self) -> JobInfo:
        """The job now: state, members read from the kernel, output counters."""
        for info in job_list(await self._conn.request("jobs")):
            if info["id"] == self.id:
                return info
        raise ProcTreeError(UNKNOWN_JOB, f"no job {self.id!r} in the server")

    def __repr__(self) -> str:
        return f"<proctree.Job {self.id}>"


def job_list(answer: Dict[str, Any]) -> List[JobInfo]:
    return cast(List[JobInfo], answer["jobs"])
