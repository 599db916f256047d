"""Small helpers the client's modules share: seconds to the protocol's
milliseconds, and futures whose outcome nobody waits for."""

from __future__ import annotations

import asyncio
from typing import Any, Optional


def ms(seconds: Optional[float]) -> Optional[int]:
    return None if seconds is None else max(0, int(round(seconds * 1000)))


def consume(fut: "asyncio.Future[Any]") -> None:
    """Marks a future's exception as seen: nobody awaits fire-and-forget requests."""
    if not fut.cancelled():
        fut.exception()
