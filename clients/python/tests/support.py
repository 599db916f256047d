"""Shared by the Python client's tests: the server of this checkout, unique
tokens, and checks that read the kernel's view (/proc, cgroup files), never
the client's own bookkeeping."""

from __future__ import annotations

import os
import random
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Callable, List, Tuple

TESTS = Path(__file__).resolve().parent
CLIENT = TESTS.parent
REPO = CLIENT.parent.parent

# The package under test is this checkout's, unless a test says otherwise.
if str(CLIENT) not in sys.path:
    sys.path.insert(0, str(CLIENT))


def server_command() -> List[str]:
    """``PROCTREE_SERVER`` when set, else this checkout's ``node bin/proctree.js serve``."""
    configured = os.environ.get("PROCTREE_SERVER", "").strip()
    if configured:
        return shlex.split(configured)
    return ["node", str(REPO / "bin" / "proctree.js"), "serve"]


def token(seconds: int = 300) -> str:
    """A unique sleep duration such as ``300.4812937``: it shows in /proc/<pid>/cmdline."""
    return f"{seconds}.{random.randrange(1 << 32)}"


def _stat(pid: str) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read()


def live_with(needle: str, comm: str = "") -> List[int]:
    """Live (non-zombie) processes whose command line contains ``needle``;
    with ``comm``, only those already running that program (a shell whose
    script names the token, or ``setsid`` before it execs, do not count)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            if needle not in cmdline:
                continue
            stat = _stat(entry)
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            if stat[stat.rindex(")") + 2] != "Z" and (not comm or name == comm):
                found.append(int(entry))
        except (OSError, ValueError):
            continue  # gone while we looked
    return found


def cgroup_procs(path: str) -> List[int]:
    """Every pid in the cgroup at ``path`` and below it (cgroup.procs); [] once it is gone."""
    pids: List[int] = []
    for dirpath, _, _ in os.walk(path):
        try:
            with open(os.path.join(dirpath, "cgroup.procs")) as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            continue  # removed while we looked
    return pids


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def kill_tokens(tokens: List[str]) -> None:
    """After a failed test: SIGKILL, by pid, whatever carries one of the test's tokens."""
    for t in tokens:
        for pid in live_with(t):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def peak_rss_kib(pid: int) -> int:
    """VmHWM of a process: the most resident memory it ever had, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise LookupError(f"no VmHWM for {pid}")


def zombie_or_gone(pid: int) -> bool:
    try:
        stat = _stat(str(pid))
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


_DRAINED_WRITER = """
import fcntl, os, struct, sys, termios, time
for fd, text in PIECES:
    os.write(fd, text.encode())
    deadline = time.monotonic() + 10
    while struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\\0\\0\\0\\0"))[0] > 0:
        if time.monotonic() > deadline:
            sys.exit(9)
        time.sleep(0.002)
"""


def drained_writer(pieces: List[Tuple[int, str]]) -> List[str]:
    """A command that writes each (fd, text) in turn and, before the next,
    waits (at most 10 s, else exit 9) until the reader took every byte from
    the pipe (FIONREAD 0): the pieces then arrive in this order, where
    ``echo a; echo b >&2`` on two pipes can be read either way round."""
    return [sys.executable, "-c", _DRAINED_WRITER.replace("PIECES", repr(pieces))]
