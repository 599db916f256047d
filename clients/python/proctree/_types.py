"""The shapes of what the client sends and the server reports (the
``$defs`` of docs/protocol.schema.json, as TypedDicts), and the option
types of the client's calls."""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, Pattern, TypedDict, Union

Json = Dict[str, Any]

#: Which part of an output longer than ``max_output`` is kept.
Keep = Literal["head", "tail", "both"]
KEEPS = ("head", "tail", "both")


class ProcessInfo(TypedDict):
    """One process as /proc showed it (docs/protocol.md, ``processInfo``)."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    comm: str
    cmdline: str
    #: When it started, in clock ticks after boot: with pid, names the process across pid reuse.
    startTime: int


class _ResourceUsage(TypedDict):
    userMs: float
    systemMs: float
    peakProcesses: int
    #: ``cgroup`` (cpu.stat, memory.peak), ``rusage`` (what was reaped), ``none`` (not known).
    source: str


class ResourceUsage(_ResourceUsage, total=False):
    """What a call's whole tree used (``resourceUsage``); ``memoryPeakBytes``
    only where the memory controller is delegated."""

    memoryPeakBytes: int
    #: pids.peak: the most processes at once, as the kernel counted them (Linux 6.1+).
    pidsPeak: int


class Terminal(TypedDict):
    """A call's terminal (``terminalInfo``): the slave's path, its size now, TERM."""

    path: Optional[str]
    cols: int
    rows: int
    term: str


class JobOutputCounters(TypedDict):
    #: Bytes the job wrote since it started.
    total: int
    #: Of those, the oldest bytes its ring buffer no longer holds.
    dropped: int
    capacity: int


class _Listener(TypedDict):
    #: ``tcp``, ``udp`` or ``unix``.
    protocol: str
    #: tcp, udp: the local address (``127.0.0.1``, ``::``); unix: the path, or ``@name``.
    address: str


class Listener(_Listener, total=False):
    """A socket a process of the call's tree listens on (``listener``): a
    listening TCP socket, a bound UDP socket, a listening unix stream socket;
    ``pid`` is the member holding it."""

    port: int
    pid: int


class _CleanupReport(TypedDict):
    reason: str
    confinement: str
    signaled: int
    killed: int
    escaped: int
    leftovers: List[ProcessInfo]
    verified: str
    durationMs: float


class CleanupReport(_CleanupReport, total=False):
    """What a ladder did (docs/protocol.md, ``cleanupReport``); ``heldOutside``:
    sockets made in the tree that still listen with it gone (a process
    outside holds them), for calls that listened."""

    heldOutside: List[Listener]


class _Ready(TypedDict):
    #: What the tree listened on when it was ready.
    listening: List[Listener]
    #: Seconds from the start to ready.
    after: float


class Ready(_Ready, total=False):
    """What made a call ready (``ready=``): ``output`` is the text that matched."""

    output: str


class ReadySpec(TypedDict, total=False):
    """When a background or ``leftovers='keep'`` call counts as started:
    ``listening`` (True: on anything; a port number), ``output`` (a text, or a
    compiled pattern whose source must also be a JavaScript regular
    expression: the server matches it), ``timeout`` (seconds; past it the tree
    is stopped, reason ``not-ready``)."""

    listening: Union[bool, int]
    output: Union[str, Pattern[str]]
    timeout: float


class Limits(TypedDict, total=False):
    """What a call's whole tree may use at most (``limits``): ``memory_bytes``
    (memory.max, no swap; past it the kernel OOM-kills a process of the tree:
    ``result.oom_killed``), ``pids`` (processes and threads at once; forks past
    it fail: ``result.pids_limited``), ``cpu`` (CPUs' worth of time: 0.5 is
    half of one). Where one cannot be enforced the call does not run:
    ``ProcTreeError`` with code ``ERR_PROCTREE_LIMITS_UNAVAILABLE``."""

    memory_bytes: int
    pids: int
    cpu: float


class _JobInfo(TypedDict):
    id: str
    command: str
    argv: List[str]
    #: When it started, in ms since the epoch.
    startedAt: float
    state: str
    #: Frozen by ``job.pause()`` (cgroup.events showed it).
    paused: bool
    pid: Optional[int]
    exitCode: Optional[int]
    signal: Optional[str]
    members: int
    processes: List[ProcessInfo]
    cgroup: str
    confinement: str
    output: JobOutputCounters
    cleanup: Optional[CleanupReport]
    usage: Optional[ResourceUsage]


class JobInfo(_JobInfo, total=False):
    """A job (``jobInfo``): ``state`` is ``running``, ``stopping``, ``exited``
    (it ended by itself) or ``stopped`` (a ladder emptied it); ``processes``
    are read from the kernel when asked; ``cleanup`` and ``usage`` once it is
    over; ``ports``, what its tree listens on now (in ``jobs()``), the same
    as ``listeners`` read at ``listenersAt`` (ms since the epoch)."""

    ports: List[Listener]
    listeners: List[Listener]
    listenersAt: Optional[float]


#: A piece of a job's output (stdout and stderr merged): ``text`` never
#: starts or ends inside a character; ``from`` is the offset of its first
#: byte, ``next`` the offset to read from next time, ``dropped`` the bytes the
#: ring buffer lost between the offset asked for and ``from``, ``total`` the
#: bytes written so far.
JobOutput = TypedDict("JobOutput", {"text": str, "from": int, "next": int, "dropped": int, "total": int})


#: What happens to what a command leaves running when it exits: stopped
#: (``kill``, the default), waited for (``wait``), or kept as a job (``keep``).
Leftovers = Literal["kill", "wait", "keep"]


class PtyOptions(TypedDict, total=False):
    """A terminal's size and TERM (``pty={"cols": 120, "rows": 40}``); default 80x24, xterm-256color."""

    cols: int
    rows: int
    term: str
