"""Must NOT type-check: proves the installed package's types reach mypy (py.typed)."""

import proctree


async def wrong(pt: proctree.ProcTree) -> str:
    text: str = (await pt.run(["ls"])).stdout  # bytes without text=True
    return text
