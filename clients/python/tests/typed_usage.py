"""Type-checked (mypy --strict) by test_package.py, against the source and
against the installed wheel: the package's annotations as a harness uses them."""

from __future__ import annotations

import asyncio
from typing import List, Optional

import proctree
from proctree.blocking import ProcTree as BlockingProcTree


async def agent_step(pt: proctree.ProcTree) -> str:
    r: proctree.Result[str] = await pt.run(["ls"], text=True, max_output=1000, keep="both", timeout=5)
    raw: proctree.Result[bytes] = await pt.run(["ls"], merge=True)
    data: bytes = raw.stdout
    call: proctree.Call = await pt.spawn(["cat"], stdin=True, merge=True)
    await call.write(b"x")
    await call.close_stdin()
    lines: List[str] = [line async for line in call.lines()]
    code: Optional[int] = await call.wait()
    report: proctree.CleanupReport = await call.terminate(grace=1)
    escaped: int = report["escaped"]
    return r.stdout + str(len(data) + len(lines) + (code or 0) + escaped)


async def jobs_and_terminals(pt: proctree.ProcTree) -> int:
    kept: proctree.Result[str] = await pt.run(["sh", "-c", "sleep 9 &"], leftovers="keep", text=True, idle_timeout=5)
    remaining: List[proctree.ProcessInfo] = kept.remaining
    usage: Optional[proctree.ResourceUsage] = kept.usage
    if kept.job_id is not None:
        job: proctree.Job = pt.job(kept.job_id)
        out: proctree.JobOutput = await job.read(from_=0, max_bytes=100)
        tail: str = (await job.tail(200))["text"]
        stopped: proctree.CleanupReport = await job.stop(grace=1)
        info: proctree.JobInfo = await job.wait()
        listed: List[proctree.JobInfo] = await pt.jobs()
        print(out["next"], tail, stopped["leftovers"], info["state"], len(listed))
    term: proctree.Call = await pt.spawn(["bash"], pty={"cols": 120, "rows": 40})
    await term.resize(100, 30)
    front: Optional[proctree.ProcessInfo] = await term.foreground()
    screen: Optional[asyncio.StreamReader] = term.pty
    size: Optional[proctree.Terminal] = term.terminal
    shown: proctree.Result[bytes] = await pt.run(["tty"], pty=True, background=False, job_buffer=1 << 20)
    return len(remaining) + (usage["peakProcesses"] if usage else 0) + len(shown.stdout) + (front["pid"] if front else 0) + (size["cols"] if size else 0) + (1 if screen else 0)


def blocking_step() -> str:
    with BlockingProcTree() as pt:
        report: Optional[proctree.CleanupReport] = pt.run(["ls"]).report
        bg = pt.run(["sleep", "9"], background=True)
        if bg.job_id is not None:
            info: proctree.JobInfo = pt.job(bg.job_id).wait(timeout=1)
            print(info["members"], pt.jobs())
        term = pt.spawn(["sh"], pty=True)
        term.resize(90, 20)
        return pt.run(["ls"], text=True).stdout + str(report) + str(term.foreground())
