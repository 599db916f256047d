"""The package as a user gets it: the wheel that scripts/python-wheel.py
builds, ``pip install`` of it and of the source directory into a fresh venv
with no package index, the import from another directory finding the
server by the discovery rules, the typing (mypy, when Debian's mypy is
installed), and the error that names what was tried when no server is found.

Set PROCTREE_REQUIRE_PYTHON_TOOLS=1 (CI does) to fail instead of skipping
when ``python3 -m venv`` or ``mypy`` is missing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

from support import CLIENT, REPO

import proctree
from proctree import ProcTree, ProcTreeError, find_server

REQUIRE = os.environ.get("PROCTREE_REQUIRE_PYTHON_TOOLS") == "1"

# What a harness runs once the package is installed: which rule found the
# server, and a call through it.
PROBE = textwrap.dedent(
    """
    import asyncio, json, proctree

    async def main():
        try:
            async with proctree.ProcTree() as pt:
                r = await pt.run(["bash", "-c", "echo hi; sleep 3 & disown"], text=True)
                out = {"stdout": r.stdout, "reason": r.report["reason"], "leftovers": r.report["leftovers"],
                       "source": pt.server_source, "command": pt.server_command}
        except proctree.ProcTreeError as err:
            out = {"code": err.code, "message": err.message}
        out["file"] = proctree.__file__
        print(json.dumps(out))

    asyncio.run(main())
    """
)


def user_env(**extra: str) -> Dict[str, str]:
    """This environment without the test's own server and package path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PROCTREE_SERVER", "PYTHONPATH")}
    env.update(PYTHONDONTWRITEBYTECODE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    env.update(extra)
    return env


def run(argv: List[str], cwd: Optional[Path] = None, env: Optional[Dict[str, str]] = None, timeout: float = 180) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(argv, cwd=cwd, env=env or user_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout, check=False)


def missing(what: str) -> None:
    if REQUIRE:
        raise AssertionError(f"{what} (PROCTREE_REQUIRE_PYTHON_TOOLS=1)")
    raise unittest.SkipTest(what)


class PackageTest(unittest.TestCase):
    tmp: Path
    wheel: Path
    venv_python: Optional[Path] = None
    venv_error = ""

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = Path(tempfile.mkdtemp(prefix="proctree-py-"))
        built = run([sys.executable, str(REPO / "scripts" / "python-wheel.py"), str(cls.tmp / "dist")])
        assert built.returncode == 0, built.stderr
        cls.wheel = Path(built.stdout.split()[0])
        venv = run([sys.executable, "-m", "venv", str(cls.tmp / "venv")])
        if venv.returncode == 0:
            cls.venv_python = cls.tmp / "venv" / "bin" / "python"
        else:
            cls.venv_error = venv.stderr.strip().splitlines()[-1] if venv.stderr.strip() else "failed"
        # A harness's project: proctree installed with npm, the program run
        # from a directory below it.
        node_modules = cls.tmp / "project" / "node_modules"
        node_modules.mkdir(parents=True)
        (node_modules / "proctree").symlink_to(REPO)
        (cls.tmp / "project" / "src").mkdir()
        (cls.tmp / "elsewhere").mkdir()

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def venv(self) -> Path:
        if self.venv_python is None:
            missing(f"python3 -m venv does not work here ({self.venv_error}); on Debian: apt-get install python3-venv")
        assert self.venv_python is not None
        return self.venv_python

    def probe(self, python: Path, cwd: Path, env: Optional[Dict[str, str]] = None) -> Dict[str, object]:
        done = run([str(python), "-c", PROBE], cwd=cwd, env=env)
        self.assertEqual(done.returncode, 0, done.stderr)
        result: Dict[str, object] = json.loads(done.stdout)
        return result

    def pip_install(self, what: str) -> None:
        # --no-index: prove that nothing is downloaded, the build included.
        done = run([str(self.venv()), "-m", "pip", "install", "--no-index", "--force-reinstall", what], cwd=self.tmp)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)

    def assert_found_from_cwd(self, out: Dict[str, object]) -> None:
        self.assertEqual(out.get("stdout"), "hi\n", out)
        self.assertEqual((out["reason"], out["leftovers"]), ("leftovers", []))
        self.assertTrue(str(out["file"]).startswith(str(self.tmp / "venv")), "the installed package, not this checkout")
        self.assertEqual(out["source"], f"node_modules/proctree found from the current directory ({self.tmp / 'project' / 'src'})")
        self.assertEqual(out["command"][1:], [str(REPO / "bin" / "proctree.js"), "serve"])  # type: ignore[index]

    def test_wheel_holds_the_package_typed_and_its_record_is_right(self) -> None:
        with zipfile.ZipFile(self.wheel) as whl:
            names = set(whl.namelist())
            for needed in ("proctree/__init__.py", "proctree/py.typed", "proctree/blocking.py", "proctree_client.py"):
                self.assertIn(needed, names)
            self.assertFalse([n for n in names if "tests" in n or "__pycache__" in n])
            info = f"proctree-{proctree.__version__}.dist-info"
            for line in whl.read(f"{info}/RECORD").decode().splitlines():
                name, digest, size = line.split(",")
                if name.endswith("RECORD"):
                    continue
                data = whl.read(name)
                expected = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                self.assertEqual((digest, int(size)), (expected, len(data)), name)
            self.assertIn("Requires-Python: >=3.9", whl.read(f"{info}/METADATA").decode())

    def test_pip_installs_the_wheel_offline_and_the_import_finds_the_server_from_the_current_directory(self) -> None:
        self.pip_install(str(self.wheel))
        self.assert_found_from_cwd(self.probe(self.venv(), self.tmp / "project" / "src"))

    def test_pip_installs_the_source_directory_offline(self) -> None:
        before = self.untracked()
        self.pip_install(str(CLIENT))
        self.assert_found_from_cwd(self.probe(self.venv(), self.tmp / "project" / "src"))
        # pip built in place: nothing (build/, *.egg-info) was left in the source tree.
        self.assertEqual(self.untracked() - before, set())

    @staticmethod
    def untracked() -> "set[str]":
        listed = run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all", "."], cwd=CLIENT).stdout
        return set(listed.splitlines())

    def test_the_client_inside_the_npm_package_finds_its_own_server(self) -> None:
        # PYTHONPATH=node_modules/proctree/clients/python, run from a directory
        # with no node_modules: the client's own location is what applies.
        out = self.probe(Path(sys.executable), self.tmp / "elsewhere", user_env(PYTHONPATH=str(CLIENT)))
        self.assertEqual(out["source"], f"node_modules/proctree found from the client's own location ({CLIENT / 'proctree'})")
        self.assertEqual(out["stdout"], "hi\n")

    def test_no_server_anywhere_is_an_error_naming_what_was_tried(self) -> None:
        node = shutil.which("node")
        assert node is not None
        only_node = self.tmp / "only-node"
        only_node.mkdir(exist_ok=True)
        if not (only_node / "node").exists():
            (only_node / "node").symlink_to(node)
        self.pip_install(str(self.wheel))
        out = self.probe(self.venv(), self.tmp / "elsewhere", user_env(PATH=str(only_node)))
        self.assertEqual(out["code"], "ESERVER")
        message = str(out["message"])
        for tried in (
            "PROCTREE_SERVER: not set",
            f"require.resolve('proctree/package.json') from the current directory ({self.tmp / 'elsewhere'}): MODULE_NOT_FOUND",
            "require.resolve('proctree/package.json') from the client's own location (",
            "npx: not on PATH",
            "npm install proctree",
        ):
            self.assertIn(tried, message)

    def test_explicit_server_and_proctree_server_come_first(self) -> None:
        env = {"PATH": os.environ["PATH"], "PROCTREE_SERVER": "node /x/proctree.js serve --flag"}
        self.assertEqual(find_server(env=env), (["node", "/x/proctree.js", "serve", "--flag"], "PROCTREE_SERVER", []))
        self.assertEqual(find_server(["my-server", "serve"], env=env).argv, ["my-server", "serve"])
        by_path = find_server(str(REPO), env=env)
        self.assertEqual((by_path.argv[1:], by_path.source), ([str(REPO / "bin" / "proctree.js"), "serve"], "the server argument"))

        async def start() -> List[str]:
            async with ProcTree(str(REPO / "bin" / "proctree.js")) as pt:
                return [pt.server_source, (await pt.run(["echo", "ok"], text=True)).stdout]

        import asyncio

        self.assertEqual(asyncio.run(start()), ["the server argument", "ok\n"])
        with self.assertRaises(ProcTreeError) as caught:
            asyncio.run(ProcTree(["false"]).start())
        self.assertEqual(caught.exception.code, "ESERVER")
        self.assertIn("`false` (from the server argument) did not start: it exited with status 1 before answering", caught.exception.message)

    def test_types_check_with_mypy_strict_from_the_source_and_the_installed_wheel(self) -> None:
        mypy = shutil.which("mypy")
        if mypy is None:
            missing("mypy is not installed; on Debian: apt-get install mypy")
        assert mypy is not None
        cache = str(self.tmp / "mypy-cache")
        source = run(
            [mypy, "--strict", "--python-version", "3.9", "--cache-dir", cache, "proctree", "proctree_client.py", "build_backend", "tests/typed_usage.py"],
            cwd=CLIENT,
        )
        self.assertEqual(source.returncode, 0, source.stdout + source.stderr)
        # As a user's project sees it: the wheel in a venv, py.typed honoured.
        self.pip_install(str(self.wheel))
        project = self.tmp / "typed"
        project.mkdir(exist_ok=True)
        for name in ("typed_usage.py", "typed_misuse.py"):
            shutil.copy(CLIENT / "tests" / name, project / name)
        mypy_args = [mypy, "--strict", "--cache-dir", cache, "--python-executable", str(self.venv())]
        good = run(mypy_args + ["typed_usage.py"], cwd=project)
        self.assertEqual(good.returncode, 0, good.stdout + good.stderr)
        bad = run(mypy_args + ["typed_misuse.py"], cwd=project)
        self.assertEqual(bad.returncode, 1, bad.stdout + bad.stderr)
        self.assertIn('Incompatible types in assignment (expression has type "bytes", variable has type "str")', bad.stdout)

    def test_versions_agree_and_the_backend_reads_pyproject_like_tomllib(self) -> None:
        sys.path.insert(0, str(CLIENT / "build_backend"))
        try:
            import proctree_build
        finally:
            sys.path.remove(str(CLIENT / "build_backend"))
        project = proctree_build.read_pyproject()
        package_json = json.loads((REPO / "package.json").read_text())
        self.assertEqual(project["project"]["version"], proctree.__version__)
        self.assertEqual(proctree.__version__, package_json["version"], "the Python client is versioned with the npm package")
        if sys.version_info >= (3, 11):
            import tomllib

            self.assertEqual(project, tomllib.loads((CLIENT / "pyproject.toml").read_text()))


if __name__ == "__main__":
    unittest.main()
