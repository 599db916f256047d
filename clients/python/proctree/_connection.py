"""The connection to one ``proctree serve`` process: starting it, the
protocol spoken over its stdin/stdout (docs/protocol.md), requests and their
answers, and each call's events handed to the call they name. ``Call`` and
``Job`` reach the server only through this.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shlex
from typing import Any, Dict, List, Mapping, Optional, Protocol

from ._discovery import ADVICE, ServerCommand, ServerSpec, find_server
from ._errors import ProcTreeError, error_from
from ._types import Json
from ._util import consume, ms

#: Longest line accepted from the server. An output event carries at most
#: one pipe read (64 KiB, 88 KiB as base64); the result of a run() carries
#: what it kept of each stream, up to ``max_output`` bytes each (64 MiB by
#: default), as base64 or as JSON text.
SERVER_LINE_LIMIT = 1024 * 1024 * 1024
#: The protocol version this client needs (jobs, collection and terminals came with 2).
_PROTOCOL = 2


class EventTarget(Protocol):
    """What the connection hands a call's events to (``Call``)."""

    id: str

    def _on_event(self, msg: Json) -> None: ...

    def _server_gone(self, err: ProcTreeError) -> None: ...


class Connection:
    """A ``proctree serve`` process, started on first use, and the requests made to it."""

    def __init__(self, server: Optional[ServerSpec] = None, env: Optional[Mapping[str, str]] = None) -> None:
        self._server_spec = server
        self._env = None if env is None else dict(env)
        self._command: Optional[ServerCommand] = None
        self._proc: Optional[asyncio.subprocess.Process] = None
        self._starting: "Optional[asyncio.Future[None]]" = None
        self._reader: "Optional[asyncio.Task[None]]" = None
        self._rids = itertools.count(1)
        self._pending: "Dict[int, asyncio.Future[Json]]" = {}
        self._calls: Dict[str, EventTarget] = {}
        self._gone: Optional[ProcTreeError] = None
        self._closing = False
        #: ``version`` and ``capabilities`` from the server's answer at start.
        self.server_info: Json = {}

    @property
    def pid(self) -> int:
        return self._proc.pid if self._proc is not None else 0

    @property
    def command(self) -> List[str]:
        return list(self._command.argv) if self._command else []

    @property
    def source(self) -> str:
        return self._command.source if self._command else ""

    @property
    def gone(self) -> Optional[ProcTreeError]:
        """Why the server is gone (every request fails with it), or None while it answers."""
        return self._gone

    async def start(self) -> None:
        """Starts the server and checks that it answers; idempotent."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)

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
            answer = await self.send("capabilities", {})
        except ProcTreeError as err:
            if err.code != "ESERVER":
                raise
            status = self._proc.returncode
            raise self._start_error(f"it exited{'' if status is None else f' with status {status}'} before answering") from None
        protocol = answer.get("protocol")
        if not isinstance(protocol, int) or protocol < _PROTOCOL:
            await self.close()
            raise self._start_error(f"it speaks protocol {protocol!r}, this client needs {_PROTOCOL} or later (update the proctree npm package)")
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

    def send(self, op: str, fields: Json) -> "asyncio.Future[Json]":
        """Writes one request now; its answer comes as the future's result (or a ProcTreeError)."""
        if self._gone is not None:
            raise ProcTreeError("ESERVER", self._gone.message)
        assert self._proc is not None and self._proc.stdin is not None
        rid = next(self._rids)
        fut: "asyncio.Future[Json]" = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        line = json.dumps({"rid": rid, "op": op, **fields}, separators=(",", ":")) + "\n"
        self._proc.stdin.write(line.encode())
        return fut

    async def request(self, op: str, **fields: Any) -> Json:
        """One request, answered: the primitive every operation is built on."""
        await self.start()
        return await self.send(op, fields)

    def send_nowait(self, op: str, **fields: Any) -> None:
        """A request whose answer nobody waits for (flow control, ladders of orphans)."""
        try:
            self.send(op, fields).add_done_callback(consume)
        except ProcTreeError:
            pass

    def register(self, call: EventTarget) -> None:
        """The call's events go to it from now on (until its close event)."""
        self._calls[call.id] = call

    def unregister(self, call_id: str) -> None:
        self._calls.pop(call_id, None)

    async def close(self, grace: Optional[float] = None, timeout: float = 30.0) -> None:
        """Stops every open call (``grace`` seconds between signal and SIGKILL), then the server."""
        self._closing = True
        proc = self._proc
        if proc is None:
            return
        if self._gone is None:
            fields: Json = {} if grace is None else {"grace": ms(grace)}
            try:
                await self.send("shutdown", fields)
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
