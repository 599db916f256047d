"""proctree for Python: run an agent's tool calls so that every process a
call starts is stopped when it ends, times out, is cancelled or terminated --
and when this Python process dies, however it dies.

The asyncio API (this module) mirrors ``asyncio.subprocess``::

    import asyncio, proctree

    async def main():
        async with proctree.ProcTree() as pt:
            r = await pt.run(["bash", "-c", "echo hi; setsid sleep 100 &"], timeout=5, text=True)
            print(r.returncode, r.stdout, r.report)

    asyncio.run(main())

Jobs (``run(..., leftovers="keep")``, ``background=True``, ``pt.jobs()``,
``pt.job(id)``) and terminals (``pty=True``, ``call.pty``, ``call.resize()``)
are those of the library. ``proctree.blocking`` has the same API for
programs without an event loop.
Both talk to ``proctree serve`` from the npm package (docs/protocol.md),
found as ``proctree._discovery`` describes. Standard library only.
"""

from . import blocking
from ._call import DEFAULT_STREAM_LIMIT, Call, Result, Signal
from ._client import ProcTree
from ._discovery import ServerCommand, find_server
from ._errors import ProcTreeError
from ._jobs import Job
from ._types import CleanupReport, JobInfo, JobOutput, Keep, Leftovers, Limits, Listener, ProcessInfo, PtyOptions, Ready, ReadySpec, ResourceUsage, Terminal

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_STREAM_LIMIT",
    "Call",
    "CleanupReport",
    "Job",
    "JobInfo",
    "JobOutput",
    "Keep",
    "Leftovers",
    "Limits",
    "Listener",
    "ProcTree",
    "ProcTreeError",
    "ProcessInfo",
    "PtyOptions",
    "Ready",
    "ReadySpec",
    "ResourceUsage",
    "Result",
    "ServerCommand",
    "Signal",
    "Terminal",
    "blocking",
    "find_server",
]
