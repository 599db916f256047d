"""Type-checked (mypy --strict) by test_package.py, against the source and
against the installed wheel: the package's annotations as a harness uses them."""

from __future__ import annotations

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


def blocking_step() -> str:
    with BlockingProcTree() as pt:
        report: Optional[proctree.CleanupReport] = pt.run(["ls"]).report
        return pt.run(["ls"], text=True).stdout + str(report)
