#!/usr/bin/env python3
"""Builds the Python client (clients/python) into a wheel and an sdist, with
the standard library only: the same PEP 517 backend that `pip install
clients/python` uses, called directly. Prints the paths it wrote.

    python3 scripts/python-wheel.py [OUT_DIR]     # default: clients/python/dist
"""

import sys
from pathlib import Path

CLIENT = Path(__file__).resolve().parent.parent / "clients" / "python"
sys.path.insert(0, str(CLIENT / "build_backend"))

import proctree_build  # noqa: E402


def main(argv: list) -> int:
    out = Path(argv[1]) if len(argv) > 1 else CLIENT / "dist"
    for built in (proctree_build.build_wheel(str(out)), proctree_build.build_sdist(str(out))):
        print(out / built)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
