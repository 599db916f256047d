"""The asyncio client: one ``proctree serve`` process, the protocol spoken
over its stdin/stdout (docs/protocol.md), and the calls made through it.

Everything else in the package (the blocking API included) is built on
``ProcTree`` and ``Call`` here: there is one implementation of the protocol.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import itertools
import json
import os
import shlex
import signal as _signal
from dataclasses import dataclass, field
from typing import (
    Any,
    AsyncIterator,
    Dict,
    Generic,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    cast,
    overload,
)

from ._capture import KEEPS, Capture, Keep
from ._discovery import ADVICE, ServerCommand, ServerSpec, find_server
from ._errors import CleanupReport, Json, ProcessInfo, ProcTreeError, empty_report, error_from

AnyStr_co = TypeVar("AnyStr_co", bytes, str)

#: Longest line accepted from the server; an output event carries at most one
#: pipe read (64 KiB, 88 KiB as base64), the rest is small.
SERVER_LINE_LIMIT = 16 * 1024 * 1024
#: A call's stdout/stderr reader asks the server to pause the call once it
#: holds twice this much unread (asyncio's own StreamReader rule), and to go
#: on once it is down to this.
DEFAULT_STREAM_LIMIT = 1024 * 1024
#: Input is sent in pieces of this size, each answered once written.
_INPUT_PIECE = 1024 * 1024
_UNKNOWN_CALL = "ERR_PROCTREE_UNKNOWN_CALL"
_PROTOCOL = 1

Signal = Union[str, int]


def _ms(seconds: Optional[float]) -> Optional[int]:
    return None if seconds is None else max(0, int(round(seconds * 1000)))


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


def _consume(fut: "asyncio.Future[Any]") -> None:
    """Marks a future's exception as seen: nobody awaits fire-and-forget requests."""
    if not fut.cancelled():
        fut.exception()


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
    #: What the main process left running when it exited (then stopped, unless leftovers='wait').
    leftovers: List[ProcessInfo] = field(default_factory=list)
    #: Bytes dropped by ``max_output`` (stdout holds stderr too with ``merge=True``).
    stdout_omitted: int = 0
    stderr_omitted: int = 0
    #: Errors after the start, such as processes that survived the ladder.
    errors: List[ProcTreeError] = field(default_factory=list)


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
    ``merge=True``, its output is in ``stdout``). Attributes are filled in as
    the server's events arrive. Awaiting the call's end — ``wait()``,
    ``communicate()`` — from a task that gets cancelled stops the whole tree
    first: wrap it in ``asyncio.shield`` to wait without that.
    """

    def __init__(self, tree: "ProcTree", call_id: str, args: Sequence[str]) -> None:
        self._tree = tree
        self.id = call_id
        self.args = list(args)
        self.pid = 0
        self.cgroup = ""
        self.confinement = ""
        self.stdout: Optional[asyncio.StreamReader] = None
        self.stderr: Optional[asyncio.StreamReader] = None
        self.exit_code: Optional[int] = None
        self.signal: Optional[str] = None
        self.leftovers: List[ProcessInfo] = []
        self.report: Optional[CleanupReport] = None
        self.timed_out = False
        self.duration: Optional[float] = None
        self.errors: List[ProcTreeError] = []
        self._sinks: Dict[str, Union[asyncio.StreamReader, Capture]] = {}
        self._holds = 0
        self._limit = DEFAULT_STREAM_LIMIT
        self._closed: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._closed.add_done_callback(_consume)
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
            self._tree._send_nowait("pause", id=self.id)
        elif was > 0 and self._holds == 0:
            self._tree._send_nowait("resume", id=self.id)

    def _on_event(self, msg: Json) -> None:
        kind = msg["event"]
        if kind == "stdout" or kind == "stderr":
            sink = self._sinks.get(kind)
            if sink is not None:
                sink.feed_data(base64.b64decode(msg["data"]))
        elif kind == "exit":
            self.exit_code, self.signal = msg["code"], msg["signal"]
        elif kind == "leftover":
            self.leftovers = msg["processes"]
        elif kind == "cleanup":
            self.report = msg["report"]
        elif kind == "error":
            self.errors.append(error_from(msg["error"]))
        elif kind == "close":
            self.exit_code, self.signal = msg["code"], msg["signal"]
            self.timed_out = bool(msg["timedOut"])
            self.report = msg["cleanup"]
            self.duration = float(msg["durationMs"]) / 1000.0
            for sink in set(self._sinks.values()):
                sink.feed_eof()
            if not self._closed.done():
                self._closed.set_result(None)

    def _server_gone(self, err: ProcTreeError) -> None:
        for sink in set(self._sinks.values()):
            sink.set_exception(err)
        if not self._closed.done():
            self._closed.set_exception(err)

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
        """The lines of stdout (with ``merge=True``, of both streams) as text,
        without their line ending. A line longer than the stream limit comes
        in pieces of that size."""
        reader = self.stdout
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
        """Writes to the call's stdin (spawn it with ``stdin=True``); returns once it is with the kernel."""
        if isinstance(data, str):
            data = data.encode()
        await self._tree._request("write", id=self.id, data=base64.b64encode(data).decode("ascii"))

    async def close_stdin(self) -> None:
        """Ends the call's stdin; harmless once the call is over."""
        if self.closed:
            return
        try:
            await self._tree._request("closeStdin", id=self.id)
        except ProcTreeError as err:
            # The call closed while the request was on its way.
            if err.code != _UNKNOWN_CALL:
                raise

    async def kill(self, signal: Signal = "SIGTERM") -> bool:
        """One signal to every process of the tree, no escalation; whether any got it."""
        if self.closed:
            return False
        try:
            answer = await self._tree._request("kill", id=self.id, signal=int(signal) if isinstance(signal, int) else signal)
        except ProcTreeError as err:
            if err.code == _UNKNOWN_CALL:
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
            self._ladder.add_done_callback(_consume)
        return self._ladder

    async def _run_ladder(self, grace: Optional[float]) -> CleanupReport:
        if self.closed:
            return self.report if self.report is not None else empty_report()
        fields: Json = {"id": self.id}
        if grace is not None:
            fields["grace"] = _ms(grace)
        try:
            report = cast(CleanupReport, (await self._tree._request("terminate", **fields))["report"])
        except ProcTreeError as err:
            # It closed on its own while the request was on its way.
            if err.code != _UNKNOWN_CALL:
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
            if err.code not in (_UNKNOWN_CALL, "ERR_PROCTREE_STDIN_CLOSED", "EPIPE"):
                raise

    async def __aenter__(self) -> "Call":
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self.closed:
            await self.terminate()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "running"
        return f"<proctree.Call {self.id} pid={self.pid} {state} returncode={self.returncode}>"


class ProcTree:
    """A ``proctree serve`` process and the calls made through it.

    ``async with ProcTree() as pt:`` starts the server (found as described in
    ``proctree._discovery``) and, at the end, stops every call still open and
    the server. If this Python process dies, however it dies, the server sees
    its stdin close and stops every call.
    """

    def __init__(
        self,
        server: Optional[ServerSpec] = None,
        *,
        env: Optional[Mapping[str, str]] = None,
        stream_limit: int = DEFAULT_STREAM_LIMIT,
    ) -> None:
        self._server_spec = server
        self._env = None if env is None else dict(env)
        self._stream_limit = stream_limit
        self._command: Optional[ServerCommand] = None
        self._proc: Optional[asyncio.subprocess.Process] = None
        self._starting: "Optional[asyncio.Future[None]]" = None
        self._reader: "Optional[asyncio.Task[None]]" = None
        self._rids = itertools.count(1)
        self._ids = itertools.count(1)
        self._pending: "Dict[int, asyncio.Future[Json]]" = {}
        self._calls: Dict[str, Call] = {}
        self._gone: Optional[ProcTreeError] = None
        self._closing = False
        #: ``version`` and ``capabilities`` from the server's answer at start.
        self.server_info: Json = {}

    # -- the server process --------------------------------------------------

    @property
    def server_pid(self) -> int:
        return self._proc.pid if self._proc is not None else 0

    @property
    def server_command(self) -> List[str]:
        return list(self._command.argv) if self._command else []

    @property
    def server_source(self) -> str:
        """How the server command was found (the discovery rule that applied)."""
        return self._command.source if self._command else ""

    async def start(self) -> "ProcTree":
        """Starts the server and checks that it answers; idempotent."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)
        return self

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self._command = await loop.run_in_executor(None, lambda: find_server(self._server_spec, env=self._env))
        argv = self._command.argv
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env=self._env,
                limit=SERVER_LINE_LIMIT,
            )
        except OSError as err:
            raise self._start_error(f"could not run {argv[0]!r}: {err.strerror or err}") from None
        self._reader = asyncio.ensure_future(self._read_server())
        try:
            answer = await self._send("capabilities", {})
        except ProcTreeError as err:
            if err.code != "ESERVER":
                raise
            status = self._proc.returncode
            raise self._start_error(f"it exited{'' if status is None else f' with status {status}'} before answering") from None
        if answer.get("protocol") != _PROTOCOL:
            await self.close()
            raise self._start_error(f"it speaks protocol {answer.get('protocol')!r}, this client {_PROTOCOL}")
        self.server_info = {"version": answer.get("version"), "capabilities": answer.get("capabilities")}

    def _start_error(self, why: str) -> ProcTreeError:
        assert self._command is not None
        message = f"the proctree server `{shlex.join(self._command.argv)}` (from {self._command.source}) did not start: {why}"
        if self._command.tried:
            message += ". Tried before it: " + "; ".join(self._command.tried) + ". " + ADVICE
        return ProcTreeError("ESERVER", message)

    async def _read_server(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        why = ""
        try:
            while True:
                try:
                    line = await stdout.readline()
                except ValueError:
                    why = f"it sent a line longer than {SERVER_LINE_LIMIT} bytes"
                    break
                if not line:
                    break
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                self._dispatch(msg)
        except asyncio.CancelledError:
            # The event loop is going away without close(): the server sees
            # its stdin close and stops every call.
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._fail_all(ProcTreeError("ESERVER", "the client's event loop stopped"))
            raise
        except Exception as err:  # a defect here must not leave awaitables hanging
            why = f"the client failed reading it: {err!r}"
        await self._server_gone(why)

    def _dispatch(self, msg: Json) -> None:
        if "rid" in msg:
            fut = self._pending.pop(msg["rid"], None) if msg["rid"] is not None else None
            if fut is None or fut.done():
                return
            if msg.get("ok"):
                fut.set_result(msg)
            else:
                fut.set_exception(error_from(msg.get("error") or {}))
        elif "event" in msg:
            call = self._calls.get(msg.get("id", ""))
            if call is None:
                return
            if msg["event"] == "close":
                del self._calls[call.id]
            call._on_event(msg)

    async def _server_gone(self, why: str) -> None:
        status: Optional[int] = None
        if self._proc is not None:
            try:
                status = await asyncio.wait_for(self._proc.wait(), 2)
            except asyncio.TimeoutError:
                pass
        if self._closing and not why:
            message = "the proctree server was closed"
        else:
            message = "the proctree server exited" + ("" if status is None else f" with status {status}")
            if why:
                message += f": {why}"
        self._fail_all(ProcTreeError("ESERVER", message))

    def _fail_all(self, err: ProcTreeError) -> None:
        self._gone = err
        pending, self._pending = list(self._pending.values()), {}
        calls, self._calls = list(self._calls.values()), {}
        for fut in pending:
            if not fut.done():
                fut.set_exception(err)
        for call in calls:
            call._server_gone(err)

    def _send(self, op: str, fields: Json) -> "asyncio.Future[Json]":
        if self._gone is not None:
            raise ProcTreeError("ESERVER", self._gone.message)
        assert self._proc is not None and self._proc.stdin is not None
        rid = next(self._rids)
        fut: "asyncio.Future[Json]" = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        line = json.dumps({"rid": rid, "op": op, **fields}, separators=(",", ":")) + "\n"
        self._proc.stdin.write(line.encode())
        return fut

    async def _request(self, op: str, **fields: Any) -> Json:
        """One request, answered: the primitive every operation is built on
        (jobs and terminals will be requests like the others)."""
        await self.start()
        return await self._send(op, fields)

    def _send_nowait(self, op: str, **fields: Any) -> None:
        """A request whose answer nobody waits for (flow control, ladders of orphans)."""
        try:
            self._send(op, fields).add_done_callback(_consume)
        except ProcTreeError:
            pass

    # -- calls ---------------------------------------------------------------

    async def spawn(
        self,
        args: Union[Sequence[str], str],
        *,
        stdin: bool = False,
        merge: bool = False,
        capture: bool = True,
        limit: int = -1,
        timeout: Optional[float] = None,
        grace: Optional[float] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        shell: Union[bool, str] = False,
        kill_signal: Optional[Signal] = None,
        leftovers: Optional[Literal["kill", "wait"]] = None,
        confinement: Optional[str] = None,
        argv0: Optional[str] = None,
        uid: Optional[int] = None,
        gid: Optional[int] = None,
    ) -> Call:
        """Starts ``args`` (a list, or a string with ``shell=True``) in its own confinement.

        ``timeout`` and ``grace`` are seconds. ``stdin=True`` gives the call a
        stdin pipe (``write``/``close_stdin``); otherwise it reads /dev/null.
        ``merge=True`` puts stderr into ``call.stdout`` in arrival order;
        ``capture=False`` discards both. ``limit`` is the readers' buffer size
        (as asyncio's): past twice that unread, the command is paused at the
        server, so memory stays bounded however much it writes.
        """
        call = self._new_call(args)
        call._limit = self._stream_limit if limit < 0 else limit
        if capture:
            for name in ("stdout",) if merge else ("stdout", "stderr"):
                reader = asyncio.StreamReader(limit=call._limit)
                reader.set_transport(_Flow(call))
                setattr(call, name, reader)
                call._sinks[name] = reader
            if merge:
                call._sinks["stderr"] = call._sinks["stdout"]
        options = _spawn_options(
            stdin=stdin, capture=capture, timeout=timeout, grace=grace, cwd=cwd, env=env, shell=shell,
            kill_signal=kill_signal, leftovers=leftovers, confinement=confinement, argv0=argv0, uid=uid, gid=gid,
        )
        await self._start_call(call, options)
        return call

    @overload
    async def run(
        self,
        args: Union[Sequence[str], str],
        *,
        text: Literal[False] = ...,
        input: Optional[Union[bytes, str]] = ...,
        max_output: Optional[int] = ...,
        keep: Keep = ...,
        marker: Optional[str] = ...,
        merge: bool = ...,
        capture: bool = ...,
        timeout: Optional[float] = ...,
        grace: Optional[float] = ...,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        shell: Union[bool, str] = ...,
        kill_signal: Optional[Signal] = ...,
        leftovers: Optional[Literal["kill", "wait"]] = ...,
        confinement: Optional[str] = ...,
        argv0: Optional[str] = ...,
        uid: Optional[int] = ...,
        gid: Optional[int] = ...,
    ) -> Result[bytes]: ...

    @overload
    async def run(
        self,
        args: Union[Sequence[str], str],
        *,
        text: Literal[True],
        input: Optional[Union[bytes, str]] = ...,
        max_output: Optional[int] = ...,
        keep: Keep = ...,
        marker: Optional[str] = ...,
        merge: bool = ...,
        capture: bool = ...,
        timeout: Optional[float] = ...,
        grace: Optional[float] = ...,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        shell: Union[bool, str] = ...,
        kill_signal: Optional[Signal] = ...,
        leftovers: Optional[Literal["kill", "wait"]] = ...,
        confinement: Optional[str] = ...,
        argv0: Optional[str] = ...,
        uid: Optional[int] = ...,
        gid: Optional[int] = ...,
    ) -> Result[str]: ...

    async def run(
        self,
        args: Union[Sequence[str], str],
        *,
        text: bool = False,
        input: Optional[Union[bytes, str]] = None,
        max_output: Optional[int] = None,
        keep: Keep = "head",
        marker: Optional[str] = None,
        merge: bool = False,
        capture: bool = True,
        timeout: Optional[float] = None,
        grace: Optional[float] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        shell: Union[bool, str] = False,
        kill_signal: Optional[Signal] = None,
        leftovers: Optional[Literal["kill", "wait"]] = None,
        confinement: Optional[str] = None,
        argv0: Optional[str] = None,
        uid: Optional[int] = None,
        gid: Optional[int] = None,
    ) -> Union[Result[bytes], Result[str]]:
        """Runs ``args`` until its whole tree is gone; never raises for an exit status.

        ``input`` is written to stdin, which is then closed. ``max_output``
        bounds what is kept of each stream (bytes, applied as it arrives):
        ``keep='head'``, ``'tail'`` or ``'both'`` (first and last halves);
        ``marker`` (a format string with ``{omitted}``) is put where bytes
        were dropped; ``result.stdout_omitted`` counts them. ``merge=True``
        puts stderr into ``stdout`` in arrival order. ``text=True`` decodes
        as UTF-8. Cancelling the task (``asyncio.timeout``,
        ``asyncio.wait_for``, ``task.cancel()``) stops the whole tree before
        the cancellation goes on, like ``timeout``.
        """
        if keep not in KEEPS:
            raise ValueError(f"keep must be one of {', '.join(map(repr, KEEPS))}, not {keep!r}")
        call = self._new_call(args)
        out = Capture(max_output, keep, marker)
        err = out if merge else Capture(max_output, keep, marker)
        if capture:
            call._sinks["stdout"], call._sinks["stderr"] = out, err
        options = _spawn_options(
            stdin=input is not None, capture=capture, timeout=timeout, grace=grace, cwd=cwd, env=env, shell=shell,
            kill_signal=kill_signal, leftovers=leftovers, confinement=confinement, argv0=argv0, uid=uid, gid=gid,
        )
        await self._start_call(call, options)
        try:
            if input is not None:
                await call._send_input(input)
            await asyncio.shield(call._closed)
        except asyncio.CancelledError:
            await call._stop_because_cancelled()
            raise
        stdout, stderr = out.value(), (b"" if merge else err.value())
        common: Dict[str, Any] = dict(
            args=call.args,
            returncode=call.returncode,
            exit_code=call.exit_code,
            signal=call.signal,
            timed_out=call.timed_out,
            report=call.report,
            duration=call.duration or 0.0,
            pid=call.pid,
            cgroup=call.cgroup,
            leftovers=call.leftovers,
            stdout_omitted=out.omitted,
            stderr_omitted=0 if merge else err.omitted,
            errors=call.errors,
        )
        if text:
            return Result[str](stdout=stdout.decode(errors="replace"), stderr=stderr.decode(errors="replace"), **common)
        return Result[bytes](stdout=stdout, stderr=stderr, **common)

    def _new_call(self, args: Union[Sequence[str], str]) -> Call:
        argv = [args] if isinstance(args, str) else [str(a) for a in args]
        if not argv or not argv[0]:
            raise ValueError("args must name a command")
        return Call(self, f"c{next(self._ids)}", argv)

    async def _start_call(self, call: Call, options: Json) -> None:
        await self.start()
        # Registered before the request: its events follow the answer at once.
        self._calls[call.id] = call
        try:
            fut = self._send("spawn", {"id": call.id, "file": call.args[0], "args": call.args[1:], "options": options})
        except ProcTreeError:
            del self._calls[call.id]
            raise
        try:
            answer = await asyncio.shield(fut)
        except asyncio.CancelledError:
            # The server may start it all the same: stop it as soon as it exists.
            fut.add_done_callback(lambda f: self._stop_orphan(call, f))
            raise
        except ProcTreeError:
            self._calls.pop(call.id, None)
            raise
        call.pid, call.cgroup, call.confinement = answer["pid"], answer["cgroup"], answer["confinement"]

    def _stop_orphan(self, call: Call, fut: "asyncio.Future[Json]") -> None:
        if fut.cancelled() or fut.exception() is not None:
            self._calls.pop(call.id, None)
        else:
            self._send_nowait("terminate", id=call.id)

    # -- the rest of the protocol ----------------------------------------------

    async def list(self) -> List[Json]:
        """The server's open calls: id, pid, cgroup, members (pids), exitCode, signal."""
        return cast(List[Json], (await self._request("list"))["calls"])

    async def capabilities(self) -> Json:
        """What this host allows (tiers, cgroup, pidfd, ...), as ``proctree doctor`` shows it."""
        return cast(Json, (await self._request("capabilities"))["capabilities"])

    async def close(self, grace: Optional[float] = None, timeout: float = 30.0) -> None:
        """Stops every open call (``grace`` seconds between signal and SIGKILL), then the server."""
        self._closing = True
        proc = self._proc
        if proc is None:
            return
        if self._gone is None:
            fields: Json = {} if grace is None else {"grace": _ms(grace)}
            try:
                await self._send("shutdown", fields)
            except ProcTreeError:
                pass
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
        if self._reader is not None:
            await self._reader

    async def __aenter__(self) -> "ProcTree":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _spawn_options(
    *,
    stdin: bool,
    capture: bool,
    timeout: Optional[float],
    grace: Optional[float],
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    shell: Union[bool, str],
    kill_signal: Optional[Signal],
    leftovers: Optional[str],
    confinement: Optional[str],
    argv0: Optional[str],
    uid: Optional[int],
    gid: Optional[int],
) -> Json:
    """spawn's keyword arguments as the protocol's ``spawnOptions``."""
    options: Json = {"stdin": "pipe" if stdin else "ignore"}
    if not capture:
        options["stdout"] = options["stderr"] = "ignore"
    for key, value in (
        ("cwd", None if cwd is None else os.fspath(cwd)),
        ("env", None if env is None else dict(env)),
        ("argv0", argv0),
        ("timeout", _ms(timeout)),
        ("grace", _ms(grace)),
        ("killSignal", int(kill_signal) if isinstance(kill_signal, int) else kill_signal),
        ("leftovers", leftovers),
        ("confinement", confinement),
        ("uid", uid),
        ("gid", gid),
    ):
        if value is not None:
            options[key] = value
    if shell:
        options["shell"] = shell
    return options
