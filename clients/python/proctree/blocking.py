"""The blocking API, for programs that are not asyncio programs.

A thin layer over the asyncio client (``proctree.ProcTree``): it runs that
client on a private event loop in a daemon thread and waits for each
operation. There is no second implementation of the protocol.

    from proctree.blocking import ProcTree

    with ProcTree() as pt:
        r = pt.run(["bash", "-c", "echo hi; setsid sleep 100 &"], timeout=5, text=True)
        print(r.returncode, r.stdout, r.report)

Interrupting a blocking ``run()`` (Ctrl-C) stops the call's whole tree
before the ``KeyboardInterrupt`` goes on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import (
    Any,
    Awaitable,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    overload,
)

from . import _client, _jobs
from ._call import DEFAULT_STREAM_LIMIT, Result, Signal
from ._discovery import ServerSpec
from ._errors import ProcTreeError
from ._types import CleanupReport, JobInfo, JobOutput, Json, Keep, Leftovers, Limits, Listener, ProcessInfo, PtyOptions, Ready, ReadySpec, ResourceUsage, Terminal

__all__ = ["ProcTree", "Call", "Job", "Output", "Result", "ProcTreeError"]

T = TypeVar("T")
_CHUNK = 64 * 1024


class _Loop:
    """A private event loop in a daemon thread that runs the asyncio client."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="proctree-loop", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Awaitable[T], timeout: Optional[float] = None) -> T:
        """Runs ``coro`` on the loop and returns its result. If the caller is
        interrupted or ``timeout`` passes, ``coro`` is cancelled (for a
        ``run()``, that stops the call's tree) and waited for."""
        finished = threading.Event()

        async def runner() -> T:
            try:
                return await coro
            finally:
                finished.set()

        fut = asyncio.run_coroutine_threadsafe(runner(), self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            if fut.done():
                raise
            fut.cancel()
            finished.wait()
            raise TimeoutError(f"not done after {timeout} s") from None
        except BaseException:
            if not fut.done():
                fut.cancel()
                finished.wait()
            raise

    def call_soon(self, fn: Any, *args: Any) -> None:
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class Output:
    """One stream (stdout or stderr) of a call, as it arrives.

    Iterating yields lines (``bytes``, newline kept; a line longer than the
    stream limit comes in pieces) until the call's tree is gone; ``read()``
    returns everything that is left; ``chunks()`` yields what arrives.
    """

    def __init__(self, loop: _Loop, reader: asyncio.StreamReader, limit: int) -> None:
        self._loop = loop
        self._reader = reader
        self._limit = limit

    def chunks(self) -> Iterator[bytes]:
        while True:
            data = self._loop.run(self._reader.read(_CHUNK))
            if not data:
                return
            yield data

    def readline(self) -> bytes:
        return self._loop.run(_read_line(self._reader, self._limit))

    def __iter__(self) -> Iterator[bytes]:
        while True:
            line = self.readline()
            if not line:
                return
            yield line

    def read(self) -> bytes:
        return self._loop.run(self._reader.read())


async def _read_line(reader: asyncio.StreamReader, limit: int) -> bytes:
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as end:
        return end.partial
    except asyncio.LimitOverrunError as long:
        return await reader.read(min(long.consumed, limit))


class Call:
    """One spawned command and everything it starts (see ``proctree.Call``)."""

    def __init__(self, loop: _Loop, core: _client.Call) -> None:
        self._loop = loop
        self._core = core
        self.stdout = Output(loop, core.stdout, core._limit) if core.stdout is not None else None
        self.stderr = Output(loop, core.stderr, core._limit) if core.stderr is not None else None
        #: What the call's terminal shows, with ``pty``; else None.
        self.pty = Output(loop, core.pty, core._limit) if core.pty is not None else None

    @property
    def id(self) -> str:
        return self._core.id

    @property
    def args(self) -> List[str]:
        return self._core.args

    @property
    def pid(self) -> int:
        return self._core.pid

    @property
    def cgroup(self) -> str:
        return self._core.cgroup

    @property
    def exit_code(self) -> Optional[int]:
        return self._core.exit_code

    @property
    def signal(self) -> Optional[str]:
        return self._core.signal

    @property
    def returncode(self) -> Optional[int]:
        return self._core.returncode

    @property
    def leftovers(self) -> List[ProcessInfo]:
        return self._core.leftovers

    @property
    def report(self) -> Optional[CleanupReport]:
        return self._core.report

    @property
    def timed_out(self) -> bool:
        return self._core.timed_out

    @property
    def duration(self) -> Optional[float]:
        return self._core.duration

    @property
    def errors(self) -> List[ProcTreeError]:
        return self._core.errors

    @property
    def closed(self) -> bool:
        return self._core.closed

    @property
    def job_id(self) -> Optional[str]:
        return self._core.job_id

    @property
    def remaining(self) -> List[ProcessInfo]:
        return self._core.remaining

    @property
    def usage(self) -> Optional[ResourceUsage]:
        return self._core.usage

    @property
    def terminal(self) -> Optional[Terminal]:
        return self._core.terminal

    @property
    def oom_killed(self) -> bool:
        """The kernel's OOM killer killed a process of the tree (known once it closed)."""
        return self._core.oom_killed

    @property
    def pids_limited(self) -> bool:
        """A fork of the tree was refused at its pids limit (known once it closed)."""
        return self._core.pids_limited

    @property
    def paused(self) -> bool:
        return self._core.paused

    def pause(self) -> None:
        """Freezes the whole tree; returns once the kernel shows it (see ``proctree.Call.pause``)."""
        self._loop.run(self._core.pause())

    def resume(self) -> None:
        """Thaws what ``pause()`` froze; returns once the kernel shows it."""
        self._loop.run(self._core.resume())

    @property
    def ready(self) -> Optional[Ready]:
        """With ``ready=``: what made the call ready, once it was."""
        return self._core.ready

    def ports(self) -> List[Listener]:
        """What the whole tree listens on now; see ``proctree.Call.ports``."""
        return self._loop.run(self._core.ports())

    def write(self, data: Union[bytes, str]) -> None:
        """Writes to the call's stdin (spawn it with ``stdin=True``), or types on its terminal (``pty``)."""
        self._loop.run(self._core.write(data))

    def close_stdin(self) -> None:
        """Ends the call's stdin (on a terminal: types ^D); harmless once the call is over."""
        self._loop.run(self._core.close_stdin())

    def resize(self, cols: int, rows: int) -> None:
        """Sets the size of the call's terminal; its foreground process group gets SIGWINCH."""
        self._loop.run(self._core.resize(cols, rows))

    def foreground(self) -> Optional[ProcessInfo]:
        """The process in the foreground of the call's terminal, or None."""
        return self._loop.run(self._core.foreground())

    def kill(self, signal: Signal = "SIGTERM") -> bool:
        """One signal to every process of the tree, no escalation."""
        return self._loop.run(self._core.kill(signal))

    def terminate(self, grace: Optional[float] = None) -> CleanupReport:
        """Stops the whole tree (signal, ``grace`` seconds, SIGKILL) and returns the report."""
        return self._loop.run(self._core.terminate(grace))

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Waits until the tree is empty and the output delivered; returns
        ``returncode``. After ``timeout`` seconds raises ``TimeoutError`` and
        leaves the call running."""
        closed = self._core._closed

        async def closing() -> None:
            await asyncio.shield(closed)

        try:
            self._loop.run(closing(), timeout)
        except TimeoutError:
            raise TimeoutError(f"call {self.id} still running after {timeout} s") from None
        return self.returncode

    def communicate(self, input: Optional[Union[bytes, str]] = None) -> Tuple[bytes, bytes]:
        """Sends ``input`` (spawn with ``stdin=True``), reads both streams to the end, waits."""
        return self._loop.run(self._core.communicate(input))

    def __enter__(self) -> "Call":
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.closed:
            self.terminate()


class Job:
    """A job of the server (see ``proctree.Job``)."""

    def __init__(self, loop: _Loop, core: _jobs.Job) -> None:
        self._loop = loop
        self._core = core

    @property
    def id(self) -> str:
        return self._core.id

    def read(self, from_: int = 0, max_bytes: Optional[int] = None) -> JobOutput:
        """Its output from byte offset ``from_``; pass ``out["next"]`` back to read what came since."""
        return self._loop.run(self._core.read(from_, max_bytes))

    def tail(self, n: int = 4096) -> JobOutput:
        """The last ``n`` bytes of its output."""
        return self._loop.run(self._core.tail(n))

    def stop(self, grace: Optional[float] = None) -> CleanupReport:
        """Stops its whole tree and returns the report."""
        return self._loop.run(self._core.stop(grace))

    def pause(self) -> bool:
        """Freezes the job's whole tree until ``resume()``; True once the kernel shows it."""
        return self._loop.run(self._core.pause())

    def resume(self) -> bool:
        """Thaws what ``pause()`` froze; False (running) once the kernel shows it."""
        return self._loop.run(self._core.resume())

    def ports(self) -> List[Listener]:
        """What the job's tree listens on now; [] once it is gone."""
        return self._loop.run(self._core.ports())

    def wait(self, timeout: Optional[float] = None) -> JobInfo:
        """Waits until its tree is gone; returns its final info. After
        ``timeout`` seconds raises ``TimeoutError`` and leaves the job running."""
        try:
            return self._loop.run(self._core.wait(), timeout)
        except TimeoutError:
            raise TimeoutError(f"job {self.id} still running after {timeout} s") from None

    def info(self) -> JobInfo:
        return self._loop.run(self._core.info())

    def __repr__(self) -> str:
        return f"<proctree.blocking.Job {self.id}>"


class ProcTree:
    """A ``proctree serve`` process and the calls made through it.

    Closing it (``close()``, the ``with`` block's end, or this Python process
    dying) stops every call it still has.
    """

    def __init__(
        self,
        server: Optional[ServerSpec] = None,
        *,
        env: Optional[Mapping[str, str]] = None,
        stream_limit: int = DEFAULT_STREAM_LIMIT,
    ) -> None:
        self._loop = _Loop()
        self._core = _client.ProcTree(server, env=env, stream_limit=stream_limit)
        try:
            self._loop.run(self._core.start())
        except BaseException:
            self._loop.stop()
            raise

    @property
    def server_pid(self) -> int:
        return self._core.server_pid

    @property
    def server_command(self) -> List[str]:
        return self._core.server_command

    @property
    def server_source(self) -> str:
        return self._core.server_source

    def spawn(
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
        leftovers: Optional[Leftovers] = None,
        background: bool = False,
        ready: Optional[ReadySpec] = None,
        idle_timeout: Optional[float] = None,
        job_buffer: Optional[int] = None,
        pty: Union[bool, PtyOptions] = False,
        confinement: Optional[str] = None,
        argv0: Optional[str] = None,
        uid: Optional[int] = None,
        gid: Optional[int] = None,
        limits: Optional[Limits] = None,
        seal: bool = False,
    ) -> Call:
        """Starts ``args`` in its own confinement; see ``proctree.ProcTree.spawn``."""
        core = self._loop.run(
            self._core.spawn(
                args, stdin=stdin, merge=merge, capture=capture, limit=limit, timeout=timeout, grace=grace,
                cwd=cwd, env=env, shell=shell, kill_signal=kill_signal, leftovers=leftovers,
                background=background, ready=ready, idle_timeout=idle_timeout, job_buffer=job_buffer, pty=pty,
                confinement=confinement, argv0=argv0, uid=uid, gid=gid, limits=limits, seal=seal,
            )
        )
        return Call(self._loop, core)

    @overload
    def run(
        self,
        args: Union[Sequence[str], str],
        *,
        text: Literal[False] = ...,
        input: Optional[Union[bytes, str]] = ...,
        max_output: Optional[int] = ...,
        keep: Keep = ...,
        marker: Union[bool, str, None] = ...,
        merge: bool = ...,
        capture: bool = ...,
        timeout: Optional[float] = ...,
        grace: Optional[float] = ...,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        shell: Union[bool, str] = ...,
        kill_signal: Optional[Signal] = ...,
        leftovers: Optional[Leftovers] = ...,
        background: bool = ...,
        ready: Optional[ReadySpec] = ...,
        idle_timeout: Optional[float] = ...,
        job_buffer: Optional[int] = ...,
        pty: Union[bool, PtyOptions] = ...,
        confinement: Optional[str] = ...,
        argv0: Optional[str] = ...,
        uid: Optional[int] = ...,
        gid: Optional[int] = ...,
        limits: Optional[Limits] = ...,
        seal: bool = ...,
    ) -> Result[bytes]: ...

    @overload
    def run(
        self,
        args: Union[Sequence[str], str],
        *,
        text: Literal[True],
        input: Optional[Union[bytes, str]] = ...,
        max_output: Optional[int] = ...,
        keep: Keep = ...,
        marker: Union[bool, str, None] = ...,
        merge: bool = ...,
        capture: bool = ...,
        timeout: Optional[float] = ...,
        grace: Optional[float] = ...,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        shell: Union[bool, str] = ...,
        kill_signal: Optional[Signal] = ...,
        leftovers: Optional[Leftovers] = ...,
        background: bool = ...,
        ready: Optional[ReadySpec] = ...,
        idle_timeout: Optional[float] = ...,
        job_buffer: Optional[int] = ...,
        pty: Union[bool, PtyOptions] = ...,
        confinement: Optional[str] = ...,
        argv0: Optional[str] = ...,
        uid: Optional[int] = ...,
        gid: Optional[int] = ...,
        limits: Optional[Limits] = ...,
        seal: bool = ...,
    ) -> Result[str]: ...

    def run(self, args: Union[Sequence[str], str], **options: Any) -> Union[Result[bytes], Result[str]]:
        """Runs ``args`` until its whole tree is gone; see ``proctree.ProcTree.run``."""
        result: Union[Result[bytes], Result[str]] = self._loop.run(self._core.run(args, **options))
        return result

    def list(self) -> List[Json]:
        """The server's open calls: id, pid, cgroup, members (pids), exitCode, signal, jobId."""
        return self._loop.run(self._core.list())

    def jobs(self) -> List[JobInfo]:
        """The jobs: running ones and the last finished ones; see ``proctree.ProcTree.jobs``."""
        return self._loop.run(self._core.jobs())

    def job(self, job_id: str) -> Job:
        """The job with this id: ``read()``, ``tail()``, ``stop()``, ``wait()``, ``info()``."""
        return Job(self._loop, self._core.job(job_id))

    def capabilities(self) -> Json:
        return self._loop.run(self._core.capabilities())

    def close(self, grace: Optional[float] = None, timeout: float = 30.0) -> None:
        """Stops every open call, then the server."""
        if self._loop.loop.is_closed():
            return
        try:
            self._loop.run(self._core.close(grace, timeout))
        finally:
            self._loop.stop()

    def __enter__(self) -> "ProcTree":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        core = getattr(self, "_core", None)
        loop = getattr(self, "_loop", None)
        proc = getattr(core, "_proc", None)
        if loop is not None and proc is not None and proc.stdin is not None:
            # A closed stdin is the server's cue to stop every call.
            loop.call_soon(proc.stdin.close)
