"""The one exception type of the client, and its errors as the server sends them."""

from __future__ import annotations

from typing import List, Optional

from ._types import CleanupReport, Json, ProcessInfo


class ProcTreeError(Exception):
    """A request the server refused, or the server itself went away.

    ``code`` is the server's Node-style code: ``ENOENT`` for a command that
    does not exist, ``ERR_INVALID_ARG_VALUE`` for a bad option, ... and
    ``ESERVER`` when no server could be started or the server died: every
    awaitable that was waiting on it fails with that code.
    """

    def __init__(self, code: str, message: str, leftovers: Optional[List[ProcessInfo]] = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.leftovers: List[ProcessInfo] = list(leftovers or [])


def error_from(wire: Json) -> ProcTreeError:
    """The exception for a protocol ``error`` object."""
    return ProcTreeError(str(wire.get("code", "ERR_PROCTREE_INTERNAL")), str(wire.get("message", "")), wire.get("leftovers"))


def empty_report(reason: str = "terminate") -> CleanupReport:
    """The report of a ladder that had nothing to stop."""
    return {
        "reason": reason,
        "confinement": "",
        "signaled": 0,
        "killed": 0,
        "escaped": 0,
        "leftovers": [],
        "verified": "",
        "durationMs": 0.0,
    }
