"""Run tool calls under proctree from Python: every process a call starts is
stopped when it ends, times out or is terminated -- and when this Python
process dies, however it dies.

Talks to ``proctree serve`` (docs/protocol.md) over a pipe; standard library
only, Python >= 3.9.

    from proctree_client import ProcTree

    with ProcTree() as pt:
        r = pt.run(["bash", "-c", "echo hi; setsid sleep 100 &"], timeout=5)
        print(r.returncode, r.stdout, r.report)

The server command is, in order: the ``server`` argument, the
``PROCTREE_SERVER`` environment variable (split like a shell would), or
``npx --no proctree serve`` (which never downloads anything).
"""

import base64
import itertools
import json
import os
import queue
import shlex
import signal as _signal
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

__all__ = ["ProcTree", "Call", "Output", "Result", "ProcTreeError"]

DEFAULT_SERVER = ["npx", "--no", "proctree", "serve"]

Json = Dict[str, Any]


class ProcTreeError(Exception):
    """A request the server refused, or the server itself went away.

    ``code`` is the server's Node-style code: ``ENOENT`` for a command that
    does not exist, ``ERR_INVALID_ARG_VALUE`` for a bad option, ...
    """

    def __init__(self, code: str, message: str, leftovers: Optional[List[Json]] = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.leftovers = leftovers or []


def _ms(seconds: Optional[float]) -> Optional[int]:
    return None if seconds is None else max(0, int(round(seconds * 1000)))


def _signal_number(name: Optional[str]) -> Optional[int]:
    if name is None:
        return None
    try:
        return int(getattr(_signal, name))
    except AttributeError:
        return None


class Output:
    """One stream (stdout or stderr) of a call, as it arrives.

    Iterating yields lines (``bytes``, newline kept) until the call's tree is
    gone; ``read()`` returns everything that is left. Either may be used once.
    """

    def __init__(self) -> None:
        self._chunks: "queue.Queue[Optional[bytes]]" = queue.Queue()

    def _feed(self, data: bytes) -> None:
        self._chunks.put(data)

    def _end(self) -> None:
        self._chunks.put(None)

    def chunks(self) -> Iterator[bytes]:
        """The chunks as the pipe delivered them."""
        while True:
            data = self._chunks.get()
            if data is None:
                # Keep the end mark for any later reader.
                self._chunks.put(None)
                return
            yield data

    def __iter__(self) -> Iterator[bytes]:
        pending = b""
        for data in self.chunks():
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line + b"\n"
        if pending:
            yield pending

    def read(self) -> bytes:
        return b"".join(self.chunks())


@dataclass
class Result:
    """What ``ProcTree.run`` returns, shaped like ``subprocess.CompletedProcess``."""

    args: Sequence[str]
    #: The exit code, or ``-N`` when signal N ended the main process.
    returncode: Optional[int]
    exit_code: Optional[int]
    #: Name of the signal that ended the main process, or None.
    signal: Optional[str]
    stdout: Union[bytes, str]
    stderr: Union[bytes, str]
    timed_out: bool
    #: The cleanup report (a dict, see docs/protocol.md) when a ladder ran, else None.
    report: Optional[Json]
    duration: float
    pid: int
    leftovers: List[Json] = field(default_factory=list)


class Call:
    """One spawned command and everything it starts.

    ``stdout``/``stderr`` are ``Output`` streams; ``terminate()`` stops the
    whole tree and returns the cleanup report; ``wait()`` waits for the tree to
    be empty. Attributes are filled in as the server's events arrive.
    """

    def __init__(self, tree: "ProcTree", call_id: str, args: Sequence[str]):
        self._tree = tree
        self.id = call_id
        self.args = list(args)
        self.pid: int = 0
        self.cgroup: str = ""
        self.stdout = Output()
        self.stderr = Output()
        self.exit_code: Optional[int] = None
        self.signal: Optional[str] = None
        #: Processes left behind when the main process exited (the 'leftover' event).
        self.leftovers: List[Json] = []
        #: The cleanup report once a ladder ran (timeout, terminate, leftovers).
        self.report: Optional[Json] = None
        self.timed_out = False
        self.duration: Optional[float] = None
        #: Errors after the start, such as processes that survived the ladder.
        self.errors: List[ProcTreeError] = []
        self._closed = threading.Event()

    @property
    def returncode(self) -> Optional[int]:
        """Like ``Popen.returncode``: None while running, ``-N`` for signal N."""
        if self.exit_code is not None:
            return self.exit_code
        num = _signal_number(self.signal)
        return -num if num is not None else None

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def _on_event(self, msg: Json) -> None:
        kind = msg["event"]
        if kind == "stdout":
            self.stdout._feed(base64.b64decode(msg["data"]))
        elif kind == "stderr":
            self.stderr._feed(base64.b64decode(msg["data"]))
        elif kind == "exit":
            self.exit_code, self.signal = msg["code"], msg["signal"]
        elif kind == "leftover":
            self.leftovers = msg["processes"]
        elif kind == "cleanup":
            self.report = msg["report"]
        elif kind == "error":
            e = msg["error"]
            self.errors.append(ProcTreeError(e["code"], e["message"], e.get("leftovers")))
        elif kind == "close":
            self.exit_code, self.signal = msg["code"], msg["signal"]
            self.timed_out = msg["timedOut"]
            self.report = msg["cleanup"]
            self.duration = msg["durationMs"] / 1000.0
            self._finish()

    def _finish(self) -> None:
        self.stdout._end()
        self.stderr._end()
        self._closed.set()

    def write(self, data: Union[bytes, str]) -> None:
        """Writes to the call's stdin (spawn it with ``stdin=True``)."""
        if isinstance(data, str):
            data = data.encode()
        self._tree._request("write", id=self.id, data=base64.b64encode(data).decode("ascii"))

    def close_stdin(self) -> None:
        """Ends the call's stdin; harmless once the call is over."""
        if self.closed:
            return
        try:
            self._tree._request("closeStdin", id=self.id)
        except ProcTreeError as err:
            # The call closed while the request was on its way.
            if err.code != "ERR_PROCTREE_UNKNOWN_CALL":
                raise

    def kill(self, signal: Union[str, int] = "SIGTERM") -> bool:
        """One signal to every process of the tree, no escalation."""
        if self.closed:
            return False
        try:
            return bool(self._tree._request("kill", id=self.id, signal=signal)["delivered"])
        except ProcTreeError as err:
            if err.code == "ERR_PROCTREE_UNKNOWN_CALL":
                return False
            raise

    def terminate(self, grace: Optional[float] = None) -> Json:
        """Stops the whole tree (signal, ``grace`` seconds, SIGKILL) and returns the report."""
        if not self.closed:
            try:
                fields: Json = {"id": self.id}
                if grace is not None:
                    fields["grace"] = _ms(grace)
                self.report = self._tree._request("terminate", **fields)["report"]
            except ProcTreeError as err:
                # It closed on its own while the request was on its way.
                if err.code != "ERR_PROCTREE_UNKNOWN_CALL":
                    raise
        self.wait()
        return self.report if self.report is not None else _empty_report()

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Waits until the tree is empty and the output drained; returns ``returncode``."""
        if not self._closed.wait(timeout):
            raise TimeoutError(f"call {self.id} still running after {timeout} s")
        return self.returncode

    def __enter__(self) -> "Call":
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.closed:
            self.terminate()


def _empty_report() -> Json:
    return {"reason": "terminate", "signaled": 0, "killed": 0, "escaped": 0, "leftovers": []}


class ProcTree:
    """A ``proctree serve`` process and the calls made through it.

    Closing it (``close()``, the ``with`` block's end, or this Python process
    dying) stops every call it still has.
    """

    def __init__(self, server: Optional[Sequence[str]] = None, *, env: Optional[Dict[str, str]] = None):
        if server is None:
            configured = os.environ.get("PROCTREE_SERVER", "").strip()
            server = shlex.split(configured) if configured else DEFAULT_SERVER
        self._proc = subprocess.Popen(
            list(server), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        self._write_lock = threading.Lock()
        self._rids = itertools.count(1)
        self._ids = itertools.count(1)
        self._pending: Dict[int, "queue.Queue[Json]"] = {}
        self._calls: Dict[str, Call] = {}
        self._state_lock = threading.Lock()
        self._gone = False
        self._reader = threading.Thread(target=self._read, name="proctree-reader", daemon=True)
        self._reader.start()

    @property
    def server_pid(self) -> int:
        return self._proc.pid

    # -- protocol plumbing -------------------------------------------------

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if "rid" in msg:
                with self._state_lock:
                    waiter = self._pending.pop(msg["rid"], None)
                if waiter is not None:
                    waiter.put(msg)
            elif "event" in msg:
                with self._state_lock:
                    call = self._calls.get(msg.get("id", ""))
                    if call is not None and msg["event"] == "close":
                        del self._calls[call.id]
                if call is not None:
                    call._on_event(msg)
        # The server is gone: nobody will answer or send events any more.
        with self._state_lock:
            self._gone = True
            waiters, self._pending = list(self._pending.values()), {}
            calls, self._calls = list(self._calls.values()), {}
        for w in waiters:
            w.put({"ok": False, "error": {"code": "ERR_PROCTREE_SERVER_GONE", "message": "the proctree server exited"}})
        for c in calls:
            c._finish()

    def _request(self, op: str, **fields: Any) -> Json:
        rid = next(self._rids)
        answer: "queue.Queue[Json]" = queue.Queue(maxsize=1)
        with self._state_lock:
            if self._gone:
                raise ProcTreeError("ERR_PROCTREE_SERVER_GONE", "the proctree server exited")
            self._pending[rid] = answer
        line = json.dumps({"rid": rid, "op": op, **fields}, separators=(",", ":")) + "\n"
        try:
            with self._write_lock:
                assert self._proc.stdin is not None
                self._proc.stdin.write(line.encode())
                self._proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            with self._state_lock:
                self._pending.pop(rid, None)
            raise ProcTreeError("ERR_PROCTREE_SERVER_GONE", "the proctree server exited") from None
        msg = answer.get()
        if not msg.get("ok"):
            e = msg["error"]
            raise ProcTreeError(e["code"], e["message"], e.get("leftovers"))
        return msg

    # -- the API -----------------------------------------------------------

    def spawn(
        self,
        args: Union[Sequence[str], str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        shell: Union[bool, str] = False,
        timeout: Optional[float] = None,
        grace: Optional[float] = None,
        kill_signal: Optional[Union[str, int]] = None,
        leftovers: Optional[str] = None,
        confinement: Optional[str] = None,
        argv0: Optional[str] = None,
        stdin: bool = False,
        capture: bool = True,
    ) -> Call:
        """Starts ``args`` (a list, or a string with ``shell=True``) in its own cgroup.

        ``timeout`` and ``grace`` are seconds. ``stdin=True`` gives the call a
        stdin pipe (``write``/``close_stdin``); otherwise it reads /dev/null.
        ``capture=False`` discards stdout and stderr.
        """
        argv = [args] if isinstance(args, str) else list(args)
        if not argv:
            raise ValueError("args must name a command")
        options: Json = {"stdin": "pipe" if stdin else "ignore"}
        if not capture:
            options["stdout"] = options["stderr"] = "ignore"
        for key, value in (
            ("cwd", cwd),
            ("env", env),
            ("argv0", argv0),
            ("timeout", _ms(timeout)),
            ("grace", _ms(grace)),
            ("killSignal", kill_signal),
            ("leftovers", leftovers),
            ("confinement", confinement),
        ):
            if value is not None:
                options[key] = value
        if shell:
            options["shell"] = shell
        call = Call(self, f"c{next(self._ids)}", argv)
        with self._state_lock:
            self._calls[call.id] = call
        try:
            answer = self._request("spawn", id=call.id, file=argv[0], args=argv[1:], options=options)
        except ProcTreeError:
            with self._state_lock:
                self._calls.pop(call.id, None)
            raise
        call.pid, call.cgroup = answer["pid"], answer["cgroup"]
        return call

    def run(
        self,
        args: Union[Sequence[str], str],
        *,
        input: Optional[Union[bytes, str]] = None,
        text: bool = False,
        **options: Any,
    ) -> Result:
        """Runs ``args`` until its whole tree is gone; never raises for an exit status.

        Takes ``spawn``'s options; ``input`` is written to stdin, which is then
        closed; ``text=True`` decodes the output as UTF-8.
        """
        call = self.spawn(args, stdin=input is not None, **options)
        out: List[bytes] = []
        err: List[bytes] = []
        readers = [
            threading.Thread(target=lambda: out.extend(call.stdout.chunks()), daemon=True),
            threading.Thread(target=lambda: err.extend(call.stderr.chunks()), daemon=True),
        ]
        for t in readers:
            t.start()
        if input is not None:
            try:
                call.write(input)
                call.close_stdin()
            except ProcTreeError as e:
                # The command may have ended without reading its input.
                if e.code not in ("ERR_PROCTREE_UNKNOWN_CALL", "ERR_PROCTREE_STDIN_CLOSED", "EPIPE"):
                    raise
        call.wait()
        for t in readers:
            t.join()
        stdout: Union[bytes, str] = b"".join(out)
        stderr: Union[bytes, str] = b"".join(err)
        if text:
            stdout, stderr = stdout.decode(), stderr.decode()
        return Result(
            args=call.args,
            returncode=call.returncode,
            exit_code=call.exit_code,
            signal=call.signal,
            stdout=stdout,
            stderr=stderr,
            timed_out=call.timed_out,
            report=call.report,
            duration=call.duration or 0.0,
            pid=call.pid,
            leftovers=call.leftovers,
        )

    def list(self) -> List[Json]:
        """The server's open calls: id, pid, cgroup, members (pids), exitCode, signal."""
        return self._request("list")["calls"]

    def capabilities(self) -> Json:
        return self._request("capabilities")["capabilities"]

    def close(self, grace: Optional[float] = None, timeout: float = 30.0) -> None:
        """Stops every open call, then the server."""
        if self._proc.poll() is None:
            try:
                fields: Json = {} if grace is None else {"grace": _ms(grace)}
                self._request("shutdown", **fields)
            except ProcTreeError:
                pass
            if self._proc.stdin is not None:
                try:
                    self._proc.stdin.close()
                except OSError:
                    pass
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._reader.join(timeout=5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> "ProcTree":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None and proc.stdin is not None:
            try:
                # A closed stdin is the server's cue to stop every call.
                proc.stdin.close()
            except OSError:
                pass

