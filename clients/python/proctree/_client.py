"""The asyncio client: ``ProcTree``, the calls made through one
``proctree serve`` process (its connection is ``_connection``), and their
options as the protocol's (docs/protocol.md).

Everything else in the package (the blocking API included) is built on
``ProcTree`` here and ``Call`` in ``_call``: there is one implementation of
the protocol.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Union, cast, overload

from ._call import DEFAULT_STREAM_LIMIT, Call, Result, Signal, _Flow
from ._connection import Connection
from ._discovery import ServerSpec
from ._errors import ProcTreeError
from ._jobs import Job, job_list
from ._types import KEEPS, JobInfo, Json, Keep, Leftovers, Limits, PtyOptions, ReadySpec
from ._util import ms

__all__ = ["ProcTree", "Call", "Result", "Signal", "DEFAULT_STREAM_LIMIT", "PtyOptions", "Leftovers"]

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
        self._conn = Connection(server, env)
        self._stream_limit = stream_limit
        self._ids = itertools.count(1)

    # -- the server process --------------------------------------------------

    @property
    def server_pid(self) -> int:
        return self._conn.pid

    @property
    def server_command(self) -> List[str]:
        return self._conn.command

    @property
    def server_source(self) -> str:
        """How the server command was found (the discovery rule that applied)."""
        return self._conn.source

    async def start(self) -> "ProcTree":
        """Starts the server and checks that it answers; idempotent."""
        await self._conn.start()
        return self

    @property
    def server_info(self) -> Json:
        """``version`` and ``capabilities`` from the server's answer at start."""
        return self._conn.server_info

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
        """Starts ``args`` (a list, or a string with ``shell=True``) in its own confinement.

        ``timeout``, ``grace`` and ``idle_timeout`` (stop the tree after that
        long without output, reason ``idle``) are seconds. ``stdin=True``
        gives the call a stdin pipe (``write``/``close_stdin``); otherwise it
        reads /dev/null. ``merge=True`` puts stderr into ``call.stdout`` in
        arrival order; ``capture=False`` discards both. ``limit`` is the
        readers' buffer size (as asyncio's): past twice that unread, the
        command is paused at the server, so memory stays bounded however much
        it writes.

        ``pty=True`` (or ``{"cols", "rows", "term"}``) runs it on a terminal
        of its own: ``call.pty`` reads what it shows, ``write()`` types,
        ``resize()``, ``foreground()``. ``leftovers='keep'`` makes what it
        leaves running a job (``call.job_id``); ``background=True`` makes the
        call a job from the start (its output goes to the job's ring buffer of
        ``job_buffer`` bytes, read with ``pt.job(call.job_id)``, and
        ``stdout``/``stderr`` are None).

        ``limits={"memory_bytes": ..., "pids": ..., "cpu": ...}`` is what the
        whole tree may use at most (see ``proctree.Limits``); where the server
        cannot enforce one, nothing runs and ``ProcTreeError`` says why
        (``ERR_PROCTREE_LIMITS_UNAVAILABLE``). ``call.pause()`` and
        ``call.resume()`` freeze and thaw the whole tree.

        ``seal=True`` runs the call sealed in its cgroup leaf (namespaces of
        its own, no capability: it cannot leave its leaf or see the server and
        its other calls); where the server cannot seal, nothing runs and
        ``ProcTreeError`` says why (``ERR_PROCTREE_SEAL_UNAVAILABLE``).
        """
        if pty and not capture:
            raise ValueError("a terminal's output cannot be discarded: capture=False needs pty=False")
        call = self._new_call(args)
        call._limit = self._stream_limit if limit < 0 else limit
        names: Sequence[str] = ()
        if pty:
            names = ("pty",)
        elif capture:
            names = ("stdout",) if merge else ("stdout", "stderr")
        # A background call's output is its job's from the start.
        for name in () if background else names:
            reader = asyncio.StreamReader(limit=call._limit)
            reader.set_transport(_Flow(call))
            setattr(call, name, reader)
            call._sinks[name] = reader
        if merge and "stdout" in call._sinks:
            call._sinks["stderr"] = call._sinks["stdout"]
        options = _spawn_options(
            stdin=stdin, capture=capture, pty=pty, timeout=timeout, grace=grace, cwd=cwd, env=env, shell=shell,
            kill_signal=kill_signal, leftovers=leftovers, background=background, ready=ready, idle_timeout=idle_timeout,
            job_buffer=job_buffer, confinement=confinement, argv0=argv0, uid=uid, gid=gid, limits=limits, seal=seal,
        )
        call._wait_ready = ready is not None
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
    async def run(
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

    async def run(
        self,
        args: Union[Sequence[str], str],
        *,
        text: bool = False,
        input: Optional[Union[bytes, str]] = None,
        max_output: Optional[int] = None,
        keep: Keep = "head",
        marker: Union[bool, str, None] = None,
        merge: bool = False,
        capture: bool = True,
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
    ) -> Union[Result[bytes], Result[str]]:
        """Runs ``args`` until its whole tree is gone; never raises for an exit status.

        ``input`` is written to stdin, which is then closed. The server keeps
        the output as it arrives, so nothing more than the kept part ever
        travels or sits in memory: ``max_output`` bytes of each stream
        (default: the server's 64 MiB), ``keep='head'``, ``'tail'`` or
        ``'both'`` (first and last halves); ``marker`` (``True``, or a text in
        which ``{omitted}`` is the count) stands where bytes were left out;
        ``result.stdout_omitted`` counts them. ``merge=True`` puts stderr into
        ``stdout`` in arrival order. ``text=True`` decodes as UTF-8, and a cut
        never splits a character (without it, cuts count bytes). Cancelling
        the task (``asyncio.timeout``, ``asyncio.wait_for``,
        ``task.cancel()``) stops the whole tree before the cancellation goes
        on, like ``timeout``.

        ``leftovers='keep'``: when the command exits leaving processes (a dev
        server started with ``&``), ``run()`` returns then, with its status,
        output, ``remaining`` and ``job_id``; the rest runs on as a job
        (``pt.job(result.job_id)``). ``background=True``: the call is a job
        from its start and ``run()`` returns at once. ``ready={"listening":
        True}`` (or a port, or ``"output": "text"``, with ``"timeout"`` in
        seconds) makes such a ``run()`` return once the server is up instead:
        ``result.ready`` says what it listened on; past the timeout the tree is
        stopped (``report["reason"] == "not-ready"``). ``pty=True`` runs it on a
        terminal: ``input`` is typed, then the end of input (^D), and
        ``stdout`` is what the terminal showed (``\\r\\n`` line ends).
        """
        if keep not in KEEPS:
            raise ValueError(f"keep must be one of {', '.join(map(repr, KEEPS))}, not {keep!r}")
        if max_output is not None and (isinstance(max_output, bool) or not isinstance(max_output, int) or max_output < 0):
            raise ValueError(f"max_output must be a non-negative number of bytes, not {max_output!r}")
        if pty and not capture:
            raise ValueError("a terminal's output cannot be discarded: capture=False needs pty=False")
        call = self._new_call(args)
        options = _spawn_options(
            stdin=input is not None, capture=capture, pty=pty, timeout=timeout, grace=grace, cwd=cwd, env=env,
            shell=shell, kill_signal=kill_signal, leftovers=leftovers, background=background, ready=ready,
            idle_timeout=idle_timeout, job_buffer=job_buffer, confinement=confinement, argv0=argv0, uid=uid, gid=gid,
            limits=limits, seal=seal,
        )
        # The server keeps what run() returns: no output travels but that.
        options.update(collect=True, encoding="utf8" if text else "base64")
        if max_output is not None:
            options["maxBuffer"] = max_output
        if keep != "head":
            options["keep"] = keep
        if marker is not None and marker is not False:
            options["marker"] = marker
        merged = merge and not pty
        if merged:
            options["all"] = True
        call._wait_ready = ready is not None
        await self._start_call(call, options)
        try:
            # On a terminal, as the library's run(): typed, then the end of input.
            if input is not None or pty:
                await call._send_input(input if input is not None else b"")
            await asyncio.shield(call._settled)
        except asyncio.CancelledError:
            await call._stop_because_cancelled()
            raise
        kept: Json = call._result or {}

        def value(key: str) -> Union[str, bytes]:
            data = cast(str, kept.get(key, ""))
            return data if text else base64.b64decode(data)

        stdout = value("all" if merged else "stdout")
        stderr = value("") if merged else value("stderr")
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
            stdout_omitted=int(kept.get("allOmitted" if merged else "stdoutOmitted", 0)),
            stderr_omitted=0 if merged else int(kept.get("stderrOmitted", 0)),
            errors=call.errors,
            job_id=call.job_id,
            remaining=call.remaining,
            usage=call.usage,
            ready=call.ready,
            oom_killed=call.oom_killed,
            pids_limited=call.pids_limited,
        )
        if text:
            return Result[str](stdout=cast(str, stdout), stderr=cast(str, stderr), **common)
        return Result[bytes](stdout=cast(bytes, stdout), stderr=cast(bytes, stderr), **common)

    def _new_call(self, args: Union[Sequence[str], str]) -> Call:
        argv = [args] if isinstance(args, str) else [str(a) for a in args]
        if not argv or not argv[0]:
            raise ValueError("args must name a command")
        return Call(self._conn, f"c{next(self._ids)}", argv)

    async def _start_call(self, call: Call, options: Json) -> None:
        await self.start()
        # Registered before the request: its events follow the answer at once.
        self._conn.register(call)
        try:
            fut = self._conn.send("spawn", {"id": call.id, "file": call.args[0], "args": call.args[1:], "options": options})
        except ProcTreeError:
            self._conn.unregister(call.id)
            raise
        try:
            answer = await asyncio.shield(fut)
        except asyncio.CancelledError:
            # The server may start it all the same: stop it as soon as it exists.
            fut.add_done_callback(lambda f: self._stop_orphan(call, f))
            raise
        except ProcTreeError:
            self._conn.unregister(call.id)
            raise
        call.pid, call.cgroup, call.confinement = answer["pid"], answer["cgroup"], answer["confinement"]
        call.job_id = answer.get("jobId") or call.job_id
        call.terminal = answer.get("pty")

    def _stop_orphan(self, call: Call, fut: "asyncio.Future[Json]") -> None:
        if fut.cancelled() or fut.exception() is not None:
            self._conn.unregister(call.id)
        else:
            self._conn.send_nowait("terminate", id=call.id)

    # -- the rest of the protocol ----------------------------------------------

    async def list(self) -> List[Json]:
        """The server's open calls: id, pid, cgroup, members (pids), exitCode, signal, jobId."""
        return cast(List[Json], (await self._conn.request("list"))["calls"])

    async def jobs(self) -> List[JobInfo]:
        """The jobs: running ones, and the last finished ones (with their
        output), in the order they became jobs; members read from the kernel now."""
        return job_list(await self._conn.request("jobs"))

    def job(self, job_id: str) -> Job:
        """The job with this id (``result.job_id``, ``call.job_id``, ``jobs()[i]["id"]``):
        ``read()``, ``tail()``, ``stop()``, ``wait()``, ``info()``."""
        return Job(self._conn, job_id)

    async def capabilities(self) -> Json:
        """What this host allows (tiers, cgroup, pidfd, ...), as ``proctree doctor`` shows it."""
        return cast(Json, (await self._conn.request("capabilities"))["capabilities"])

    async def close(self, grace: Optional[float] = None, timeout: float = 30.0) -> None:
        """Stops every open call (``grace`` seconds between signal and SIGKILL), then the server."""
        await self._conn.close(grace, timeout)

    async def __aenter__(self) -> "ProcTree":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _ready_options(ready: ReadySpec) -> Json:
    """``ready=`` as the protocol's ``readyOptions`` (timeout in ms, a pattern as its source)."""
    out: Json = {}
    if "listening" in ready:
        listening = ready["listening"]
        out["listening"] = True if listening is True else int(listening)
    if "output" in ready:
        output = ready["output"]
        if isinstance(output, str):
            out["output"] = output
        else:
            out["outputPattern"] = output.pattern
    if "timeout" in ready:
        out["timeout"] = max(1, ms(ready["timeout"]) or 0)
    return out


def _spawn_options(
    *,
    stdin: bool,
    capture: bool,
    pty: Union[bool, PtyOptions],
    timeout: Optional[float],
    grace: Optional[float],
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    shell: Union[bool, str],
    kill_signal: Optional[Signal],
    leftovers: Optional[str],
    background: bool,
    ready: Optional[ReadySpec],
    idle_timeout: Optional[float],
    job_buffer: Optional[int],
    confinement: Optional[str],
    argv0: Optional[str],
    uid: Optional[int],
    gid: Optional[int],
    limits: Optional[Limits] = None,
    seal: bool = False,
) -> Json:
    """spawn's keyword arguments as the protocol's ``spawnOptions``."""
    options: Json = {}
    if pty:
        # fds 0-2 are the terminal: no stdio choice to make.
        options["pty"] = True if pty is True else dict(pty)
    else:
        options["stdin"] = "pipe" if stdin else "ignore"
        if not capture:
            options["stdout"] = options["stderr"] = "ignore"
    for key, value in (
        ("cwd", None if cwd is None else os.fspath(cwd)),
        ("env", None if env is None else dict(env)),
        ("argv0", argv0),
        ("timeout", ms(timeout)),
        ("grace", ms(grace)),
        ("killSignal", int(kill_signal) if isinstance(kill_signal, int) else kill_signal),
        ("leftovers", leftovers),
        ("idleTimeout", ms(idle_timeout)),
        ("jobBuffer", job_buffer),
        ("confinement", confinement),
        ("uid", uid),
        ("gid", gid),
    ):
        if value is not None:
            options[key] = value
    if background:
        options["background"] = True
    if ready is not None:
        options["ready"] = _ready_options(ready)
    if shell:
        options["shell"] = shell
    if limits:
        options["limits"] = _limits(limits)
    if seal:
        options["seal"] = True
    return options


def _limits(limits: Limits) -> Json:
    """``limits=`` as the protocol's ``limits`` (protocol 4)."""
    unknown = set(limits) - {"memory_bytes", "pids", "cpu"}
    if unknown:
        raise ValueError(f"limits takes memory_bytes, pids and cpu, not {', '.join(sorted(unknown))}")
    out: Json = {}
    if "memory_bytes" in limits:
        out["memoryBytes"] = limits["memory_bytes"]
    if "pids" in limits:
        out["pids"] = limits["pids"]
    if "cpu" in limits:
        out["cpu"] = limits["cpu"]
    return out
