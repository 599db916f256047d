"""The blocking client under its first name, kept for existing programs.

New code: ``import proctree`` (asyncio) or ``from proctree.blocking import
ProcTree`` -- this module is that, re-exported.
"""

from proctree import ProcTreeError
from proctree.blocking import Call, Output, ProcTree, Result

__all__ = ["ProcTree", "Call", "Output", "Result", "ProcTreeError"]
