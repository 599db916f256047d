"""Which ``proctree serve`` to start, in this order:

1. the ``server`` argument: a command (a list of strings), or the path of the
   proctree npm package (or of its ``bin/proctree.js``), run with ``node``;
2. ``PROCTREE_SERVER``, a command line split like a shell would;
3. ``node <package>/bin/proctree.js serve``, the package found by Node's own
   ``require.resolve('proctree/package.json')`` from the current directory,
   then from this file's directory (the client inside an npm-installed
   ``node_modules/proctree/clients/python``);
4. ``npx --no proctree serve`` (never downloads anything).

When none applies, the error names each place tried and why it failed.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Union

from ._errors import ProcTreeError

HERE = Path(__file__).resolve().parent

# One node process answers for every directory: createRequire(<dir>/x) is
# require() as a module in <dir> would do it, node_modules walk and a
# package's own name included.
_RESOLVE = """
const { createRequire } = require('module');
const path = require('path');
const out = process.argv.slice(1).map((dir) => {
  try {
    return { found: createRequire(path.join(dir, '[proctree-client]')).resolve('proctree/package.json') };
  } catch (err) {
    return { error: err && err.code ? err.code : String(err) };
  }
});
process.stdout.write(JSON.stringify(out));
"""


class ServerCommand(NamedTuple):
    """The command that starts the server, how it was found, and what was tried before."""

    argv: List[str]
    source: str
    tried: List[str]


ServerSpec = Union[str, "os.PathLike[str]", Sequence[str]]


def _package_command(node: str, path: Path) -> List[str]:
    script = path if path.suffix == ".js" else path / "bin" / "proctree.js"
    return [node, str(script), "serve"]


def find_server(
    server: Optional[ServerSpec] = None,
    *,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
) -> ServerCommand:
    """The server command, by the rules of this module; raises ``ProcTreeError('ESERVER')``."""
    environ = os.environ if env is None else env
    search_path = environ.get("PATH", os.defpath)
    node = shutil.which("node", path=search_path)
    if server is not None:
        if isinstance(server, (str, os.PathLike)):
            if node is None:
                raise ProcTreeError("ESERVER", f"the server argument {os.fspath(server)!r} needs node, which is not on PATH")
            return ServerCommand(_package_command(node, Path(os.fspath(server))), "the server argument", [])
        argv = [str(a) for a in server]
        if not argv:
            raise ValueError("server must name a command")
        return ServerCommand(argv, "the server argument", [])

    tried: List[str] = []
    configured = environ.get("PROCTREE_SERVER", "").strip()
    if configured:
        return ServerCommand(shlex.split(configured), "PROCTREE_SERVER", [])
    tried.append("PROCTREE_SERVER: not set")

    if node is None:
        tried.append("node: not on PATH")
    else:
        places = [("the current directory", cwd or os.getcwd()), ("the client's own location", str(HERE))]
        answers = _resolve(node, [dir for _, dir in places], environ)
        for (label, dir), answer in zip(places, answers):
            where = f"require.resolve('proctree/package.json') from {label} ({dir})"
            found = answer.get("found")
            if not found:
                tried.append(f"{where}: {answer.get('error', 'no answer')}")
                continue
            script = Path(found).parent / "bin" / "proctree.js"
            if not script.is_file():
                tried.append(f"{where}: {found}, but it has no bin/proctree.js")
                continue
            return ServerCommand([node, str(script), "serve"], f"node_modules/proctree found from {label} ({dir})", tried)

    npx = shutil.which("npx", path=search_path)
    if npx is not None:
        return ServerCommand([npx, "--no", "proctree", "serve"], "npx, the last resort", tried)
    tried.append("npx: not on PATH")
    raise ProcTreeError("ESERVER", no_server_message(tried))


ADVICE = (
    "Install the npm package where this program runs (npm install proctree), or set PROCTREE_SERVER"
    " to a command such as 'node /path/to/node_modules/proctree/bin/proctree.js serve'."
)


def no_server_message(tried: Sequence[str]) -> str:
    return "no proctree server found. Tried: " + "; ".join(tried) + ". " + ADVICE


def _resolve(node: str, dirs: Sequence[str], env: Mapping[str, str]) -> List[Dict[str, Any]]:
    try:
        done = subprocess.run(
            [node, "-e", _RESOLVE, *dirs],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            timeout=30,
            check=False,
        )
        answers = json.loads(done.stdout or b"null")
        if isinstance(answers, list) and len(answers) == len(dirs):
            return [a if isinstance(a, dict) else {} for a in answers]
        reason = f"node exited with status {done.returncode}: {done.stderr.decode(errors='replace').strip()[-300:]}"
    except (OSError, ValueError, subprocess.TimeoutExpired) as err:
        reason = f"node failed: {err}"
    return [{"error": reason} for _ in dirs]
