"""One call of the asyncio client: its output (StreamReaders fed by the
server's events, with flow control back to the server), its terminal, its
end, and the ladder when it is terminated or the task awaiting it is
cancelled."""

from __future__ import annotations

import asyncio
import base64
import codecs
import signal as _signal
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Dict, Generic, List, Optional, Sequence, Tuple, TypeVar, Union, cast

from ._connection import Connection
from ._errors import ProcTreeError, empty_report, error_from
from ._types import CleanupReport, Json, Listener, ProcessInfo, Ready, ResourceUsage, Terminal
from ._util import consume, ms

AnyStr_co = TypeVar("AnyStr_co", bytes, str)

#: A call's stdout/stderr reader asks the server to pause the call once it
#: holds twice this much unread (asyncio's own StreamReader rule), and to go
#: on once it is down to this.
DEFAULT_STREAM_LIMIT = 1024 * 1024
#: Input is sent in pieces of this size, each answered once written.
_INPUT_PIECE = 1024 * 1024
UNKNOWN_CALL = "ERR_PROCTREE_UNKNOWN_CALL"

Signal = Union[str, int]


def _signal_number(name: Optional[str]) -> Optional[int]:
    if name is None:
        return None
    value = getattr(_signal, name, None)
    return int(value) if value is not None else None


def _returncode(exit_code: Optional[int], signal: Optional[str]) -> Optional[int]:
    if exit_code is not None:
        return exit_code
    num = _signal_number(signal)
    return -num if num is not None else None


@dataclass
class Result(Generic[AnyStr_co]):
    """What ``run()`` returns, shaped like ``subprocess.CompletedProcess``."""

    args: List[str]
    #: The exit code, or ``-N`` when signal N ended the main process.
    returncode: Optional[int]
    exit_code: Optional[int]
    #: Name of the signal that ended the main process, or None.
    signal: Optional[str]
    stdout: AnyStr_co
    stderr: AnyStr_co
    timed_out: bool
    #: The cleanup report when a ladder ran (timeout, leftovers), else None.
    report: Optional[CleanupReport]
    duration: float
    pid: int
    cgroup: str = ""
    #: What the main process left running when it exited (then stopped, unless leftovers='wait' or 'keep').
    leftovers: List[ProcessInfo] = field(default_factory=list)
    #: Bytes left out by ``max_output`` (stdout holds stderr too with ``merge=True``).
    stdout_omitted: int = 0
    stderr_omitted: int = 0
    #: Errors after the start, such as processes that survived the ladder.
    errors: List[ProcTreeError] = field(default_factory=list)
    #: The job's id (``pt.job(result.job_id)``) when the call became a job:
    #: ``background=True``, or ``leftovers='keep'`` with processes left; else None.
    job_id: Optional[str] = None
    #: With ``leftovers='keep'``: the processes still running when the result came (they are the job).
    remaining: List[ProcessInfo] = field(default_factory=list)
    #: What the whole tree used (so far, for a job: ``pt.job(id).wait()`` gives the final figures).
    usage: Optional[ResourceUsage] = None
    #: With ``ready=``: what made the call ready, or None when it never was
    #: (the tree ended first, or ``ready["timeout"]`` stopped it: ``report["reason"]`` is ``not-ready``).
    ready: Optional[Ready] = None
    #: The kernel's OOM killer killed a process of the tree (its ``limits``
    #: memory, or the machine's): memory.events oom_kill of its cgroup grew.
    oom_killed: bool = False
    #: A fork of the tree was refused at its ``limits`` pids (pids.events max grew).
    pids_limited: bool = False


class _Flow(asyncio.ReadTransport):
    """What a call's StreamReader pauses and resumes: the call's output at the server.

    The server pauses both streams of a call at once, so the readers of one
    call share a count: pause when the first asks, resume when the last is done.
    """

    def __init__(self, call: "Call") -> None:
        super().__init__()
        self._call = call
        self._paused = False

    def pause_reading(self) -> None:
        if not self._paused:
            self._paused = True
            self._call._hold(+1)

    def resume_reading(self) -> None:
        if self._paused:
            self._paused = False
            self._call._hold(-1)

    def is_reading(self) -> bool:
        return not self._paused


class Call:
    """One spawned command and everything it starts.

    ``stdout`` and ``stderr`` are ``asyncio.StreamReader`` objects fed by the
    server (None with ``capture=False``; ``stderr`` is None with
    ``merge=True``, its output is in ``stdout``). With ``pty``, ``pty`` is the
    reader of what the terminal shows (stdout and stderr as one stream) and
    ``stdout``/``stderr`` are None; ``write()`` types. Once the call is a job
    (``job_id`` set), its output goes to the job's ring buffer: the readers
    end there, read the rest with ``pt.job(call.job_id)``. Attributes are
    filled in as the server's events arrive. Awaiting the call's end —
    ``wait()``, ``communicate()`` — from a task that gets cancelled stops the
    whole tree first: wrap it in ``asyncio.shield`` to wait without that.
    """

    def __init__(self, conn: Connection, call_id: str, args: Sequence[str]) -> None:
        self._conn = conn
        self.id = call_id
        self.args = list(args)
        self.pid = 0
        self.cgroup = ""
        self.confinement = ""
        self.stdout: Optional[asyncio.StreamReader] = None
        self.stderr: Optional[asyncio.StreamReader] = None
        #: What the call's terminal shows, with ``pty``; else None.
        self.pty: Optional[asyncio.StreamReader] = None
        #: The terminal's path, size and TERM, with ``pty``; else None.
        self.terminal: Optional[Terminal] = None
        self.exit_code: Optional[int] = None
        self.signal: Optional[str] = None
        self.leftovers: List[ProcessInfo] = []
        self.report: Optional[CleanupReport] = None
        self.timed_out = False
        self.duration: Optional[float] = None
        self.errors: List[ProcTreeError] = []
        #: Set once the call is a job (``background=True``, or ``leftovers='keep'`` with processes left).
        self.job_id: Optional[str] = None
        #: With ``leftovers='keep'``: what was still running when the call became a job.
        self.remaining: List[ProcessInfo] = []
        #: What the whole tree used: so far at the job event, in full once closed.
        self.usage: Optional[ResourceUsage] = None
        #: The kernel's verdicts, known at close (see ``Result``).
        self.oom_killed = False
        self.pids_limited = False
        #: Frozen by ``pause()`` (cgroup.events showed it), until ``resume()`` or a ladder.
        self.paused = False
        #: With ``ready=``: what made the call ready, once it was.
        self.ready: Optional[Ready] = None
        #: run() settles at the ready event (or close), not at the job event.
        self._wait_ready = False
        self._sinks: Dict[str, asyncio.StreamReader] = {}
        self._holds = 0
        self._limit = DEFAULT_STREAM_LIMIT
        self._started_at = asyncio.get_running_loop().time()
        #: The output the server collected (``collect``), from the job or close event.
        self._result: Optional[Json] = None
        self._closed: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._closed.add_done_callback(consume)
        #: The call's answer for run(): its close, or the moment it became a job.
        self._settled: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._settled.add_done_callback(consume)
        self._ladder: "Optional[asyncio.Future[CleanupReport]]" = None

    @property
    def returncode(self) -> Optional[int]:
        """Like ``Popen.returncode``: None while running, ``-N`` for signal N."""
        return _returncode(self.exit_code, self.signal)

    @property
    def closed(self) -> bool:
        """The tree is empty and every byte of output was delivered."""
        return self._closed.done()

    # -- fed by ProcTree ---------------------------------------------------

    def _hold(self, delta: int) -> None:
        was = self._holds
        self._holds += delta
        if self.closed:
            return
        if was == 0 and self._holds > 0:
            self._conn.send_nowait("pause", id=self.id)
        elif was > 0 and self._holds == 0:
            self._conn.send_nowait("resume", id=self.id)

    def _on_event(self, msg: Json) -> None:
        kind = msg["event"]
        if kind == "stdout" or kind == "stderr" or kind == "pty":
            sink = self._sinks.get(kind)
            if sink is not None:
                sink.feed_data(base64.b64decode(msg["data"]))
        elif kind == "job":
            self.job_id, self.remaining, self.usage = msg["jobId"], msg["remaining"], msg["usage"]
            self._result = msg.get("result")
            if self.duration is None:
                self.duration = asyncio.get_running_loop().time() - self._started_at
            # What the job writes from now on goes to its ring buffer, not here.
            for sink in set(self._sinks.values()):
                sink.feed_eof()
            if not self._settled.done() and not self._wait_ready:
                self._settled.set_result(None)
        elif kind == "ready":
            ready: Ready = {"listening": msg["listening"], "after": float(msg["afterMs"]) / 1000.0}
            if "output" in msg:
                ready["output"] = msg["output"]
            self.ready = ready
            if not self._settled.done():
                self._settled.set_result(None)
        elif kind == "exit":
            self.exit_code, self.signal = msg["code"], msg["signal"]
        elif kind == "leftover":
            self.leftovers = msg["processes"]
        elif kind == "cleanup":
            self.report = msg["report"]
            # A ladder thaws a paused tree after its signals.
            self.paused = False
        elif kind == "error":
            self.errors.append(error_from(msg["error"]))
        elif kind == "close":
            self.exit_code, self.signal = msg["code"], msg["signal"]
            self.timed_out = bool(msg["timedOut"])
            self.oom_killed = bool(msg.get("oomKilled", False))
            self.pids_limited = bool(msg.get("pidsLimited", False))
            self.paused = False
            self.report = msg["cleanup"]
            self.duration = float(msg["durationMs"]) / 1000.0
            self.usage, self.job_id = msg["usage"], msg["jobId"]
            if "result" in msg:
                self._result = msg["result"]
            for sink in set(self._sinks.values()):
                if not sink.at_eof():
                    sink.feed_eof()
            if not self._closed.done():
                self._closed.set_result(None)
            if not self._settled.done():
                self._settled.set_result(None)

    def _server_gone(self, err: ProcTreeError) -> None:
        for sink in set(self._sinks.values()):
            sink.set_exception(err)
        for fut in (self._closed, self._settled):
            if not fut.done():
                fut.set_exception(err)

    # -- the API -----------------------------------------------------------

    async def wait(self) -> Optional[int]:
        """Waits until the tree is empty and the output delivered; returns ``returncode``.

        Cancelling the waiting task stops the tree (the ladder) before the
        cancellation goes on.
        """
        try:
            await asyncio.shield(self._closed)
        except asyncio.CancelledError:
            await self._stop_because_cancelled()
            raise
        return self.returncode

    async def communicate(self, input: Optional[Union[bytes, str]] = None) -> Tuple[bytes, bytes]:
        """Like ``asyncio.subprocess.Process.communicate``: sends ``input``
        (spawn with ``stdin=True``), reads stdout and stderr to the end, waits."""

        async def read(reader: Optional[asyncio.StreamReader]) -> bytes:
            return b"" if reader is None else await reader.read()

        jobs: List["asyncio.Future[bytes]"] = [asyncio.ensure_future(read(self.stdout)), asyncio.ensure_future(read(self.stderr))]
        try:
            if input is not None:
                await self._send_input(input)
            out, err = await asyncio.gather(*jobs)
            await asyncio.shield(self._closed)
        except asyncio.CancelledError:
            for job in jobs:
                job.cancel()
            await self._stop_because_cancelled()
            raise
        return out, err

    async def lines(self, *, encoding: str = "utf-8", errors: str = "replace") -> AsyncIterator[str]:
        """The lines of stdout (with ``merge=True``, of both streams; with
        ``pty``, of the terminal) as text, without their line ending. A line
        longer than the stream limit comes in pieces of that size."""
        reader = self.pty or self.stdout
        if reader is None:
            raise ValueError("this call's stdout is not captured")
        decoder = codecs.getincrementaldecoder(encoding)(errors)
        in_long_line = False
        while True:
            try:
                raw = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as end:
                rest = decoder.decode(end.partial, final=True)
                if rest:
                    yield rest
                return
            except asyncio.LimitOverrunError as long:
                in_long_line = True
                yield decoder.decode(await reader.read(min(long.consumed, self._limit)))
                continue
            text = decoder.decode(raw)
            text = text[:-2] if text.endswith("\r\n") else text[:-1]
            # The end of a line that came in pieces: nothing more to say.
            if text or not in_long_line:
                yield text
            in_long_line = False

    async def write(self, data: Union[bytes, str]) -> None:
        """Writes to the call's stdin (spawn it with ``stdin=True``), or types
        on its terminal (``pty``: end a line with ``\\r``, as the Enter key
        does); returns once it is with the kernel."""
        if isinstance(data, str):
            data = data.encode()
        await self._conn.request("write", id=self.id, data=base64.b64encode(data).decode("ascii"))

    async def close_stdin(self) -> None:
        """Ends the call's stdin; harmless once the call is over. On a
        terminal, types the end-of-file character (^D) at the start of a line:
        its reader sees the end of input, and typing still works."""
        if self.closed:
            return
        try:
            await self._conn.request("closeStdin", id=self.id)
        except ProcTreeError as err:
            # The call closed while the request was on its way.
            if err.code != UNKNOWN_CALL:
                raise

    async def resize(self, cols: int, rows: int) -> None:
        """Sets the size of the call's terminal (``pty``): its foreground
        process group gets SIGWINCH. ``ERR_PROCTREE_NO_PTY`` without a terminal,
        ``ERR_OUT_OF_RANGE`` outside 1-65535."""
        await self._conn.request("resize", id=self.id, cols=cols, rows=rows)
        if self.terminal is not None:
            self.terminal["cols"], self.terminal["rows"] = cols, rows

    async def foreground(self) -> Optional[ProcessInfo]:
        """The process in the foreground of the call's terminal (``comm``
        says what it is: "vim is in the foreground"); None when no process
        group is, or the terminal is gone."""
        answer = await self._conn.request("foreground", id=self.id)
        return cast(Optional[ProcessInfo], answer["process"])

    async def ports(self) -> List[Listener]:
        """What the whole tree listens on now (escapees included, nothing
        outside it): listening TCP, bound UDP and listening unix stream
        sockets, each with the member holding it; [] once the tree is gone."""
        return cast(List[Listener], (await self._conn.request("ports", id=self.id))["ports"])

    async def pause(self) -> None:
        """Freezes the whole tree (its cgroup leaf's cgroup.freeze); returns
        once the kernel shows it frozen. ``timeout`` runs on, ``idle_timeout``
        does not; ``terminate()`` still stops it. ``ProcTreeError``:
        ``ERR_PROCTREE_PAUSE_UNSUPPORTED`` outside the cgroup and systemd
        tiers, ``ERR_PROCTREE_NOT_RUNNING`` once the tree is gone."""
        self.paused = bool((await self._conn.request("pauseTree", id=self.id))["paused"])

    async def resume(self) -> None:
        """Thaws what ``pause()`` froze; returns once the kernel shows it."""
        self.paused = bool((await self._conn.request("resumeTree", id=self.id))["paused"])

    async def kill(self, signal: Signal = "SIGTERM") -> bool:
        """One signal to every process of the tree, no escalation; whether any got it."""
        if self.closed:
            return False
        try:
            answer = await self._conn.request("kill", id=self.id, signal=int(signal) if isinstance(signal, int) else signal)
        except ProcTreeError as err:
            if err.code == UNKNOWN_CALL:
                return False
            raise
        return bool(answer["delivered"])

    async def terminate(self, grace: Optional[float] = None) -> CleanupReport:
        """Stops the whole tree (signal, ``grace`` seconds, SIGKILL), waits for
        the call to close, and returns the cleanup report."""
        report = await self._terminate(grace)
        await asyncio.shield(self._closed)
        return self.report if self.report is not None else report

    def _terminate(self, grace: Optional[float] = None) -> "asyncio.Future[CleanupReport]":
        """The ladder, asked for once; later callers share it."""
        if self._ladder is None:
            self._ladder = asyncio.ensure_future(self._run_ladder(grace))
            self._ladder.add_done_callback(consume)
        return self._ladder

    async def _run_ladder(self, grace: Optional[float]) -> CleanupReport:
        if self.closed:
            return self.report if self.report is not None else empty_report()
        fields: Json = {"id": self.id}
        if grace is not None:
            fields["grace"] = ms(grace)
        try:
            report = cast(CleanupReport, (await self._conn.request("terminate", **fields))["report"])
        except ProcTreeError as err:
            # It closed on its own while the request was on its way.
            if err.code != UNKNOWN_CALL:
                raise
            return self.report if self.report is not None else empty_report()
        self.report = report
        return report

    async def _stop_because_cancelled(self) -> None:
        """The task awaiting this call was cancelled: run the ladder and wait
        until the call closed, unless cancelled once more (then it goes on
        without us)."""
        if self.closed:
            return
        try:
            await asyncio.shield(self._terminate())
            await asyncio.shield(self._closed)
        except (asyncio.CancelledError, ProcTreeError):
            pass

    async def _send_input(self, data: Union[bytes, str]) -> None:
        """Writes ``data`` and closes stdin; a command that ended without reading it is not an error."""
        if isinstance(data, str):
            data = data.encode()
        try:
            for start in range(0, len(data), _INPUT_PIECE):
                await self.write(data[start : start + _INPUT_PIECE])
            await self.close_stdin()
        except ProcTreeError as err:
            if err.code not in (UNKNOWN_CALL, "ERR_PROCTREE_STDIN_CLOSED", "EPIPE"):
                raise

    async def __aenter__(self) -> "Call":
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self.closed:
            await self.terminate()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "running"
        job = f" job={self.job_id}" if self.job_id else ""
        return f"<proctree.Call {self.id} pid={self.pid}{job} {state} returncode={self.returncode}>"
