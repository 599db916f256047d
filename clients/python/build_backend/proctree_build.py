"""A PEP 517 build backend for the proctree Python package, standard library only.

Why not setuptools: the package index is often unreachable where proctree
runs (CI machines, sandboxes), and with build isolation pip must download a
backend before it can build anything. This backend has no requirements, so
``pip install clients/python`` works offline, on every Python >= 3.9 (3.12+
venvs no longer carry setuptools). ``scripts/python-wheel.py`` calls the same
functions to build the wheel and sdist to publish.

What goes in the wheel: the ``proctree`` package (with ``py.typed``) and the
``proctree_client`` compatibility module; the metadata comes from the
``[project]`` table of ``pyproject.toml``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

SOURCE = Path(__file__).resolve().parent.parent
PACKAGE = "proctree"
MODULES = ["proctree_client.py"]
WHEEL_TAG = "py3-none-any"


# -- pyproject.toml --------------------------------------------------------------
# tomllib is 3.11+; this reads the subset pyproject.toml uses: [tables],
# key = "string" | ["strings", ...] | { key = "string" }, and comments.


def _strip_comment(line: str) -> str:
    out, in_string, escaped = [], False, False
    for ch in line:
        if in_string:
            escaped = ch == "\\" and not escaped
            if ch == '"' and not escaped:
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "#":
            break
        out.append(ch)
    return "".join(out).strip()


_BARE_KEY = re.compile(r"([A-Za-z0-9_-]+)\s*=")


def _value(text: str) -> Any:
    text = text.strip()
    if text.startswith("{"):
        body = text[1:-1].strip()
        return dict(_pairs(body)) if body else {}
    # Strings and arrays of strings are JSON once inline-table keys are quoted.
    return json.loads(re.sub(r",\s*\]$", "]", text))


def _pairs(body: str) -> List[Tuple[str, Any]]:
    pairs = []
    for part in re.split(r",(?=\s*[A-Za-z0-9_-]+\s*=)", body):
        key, _, value = part.partition("=")
        pairs.append((key.strip(), _value(value)))
    return pairs


def read_pyproject(path: Path = SOURCE / "pyproject.toml") -> Dict[str, Any]:
    doc: Dict[str, Any] = {}
    table = doc
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = _strip_comment(raw)
        if not line and not pending:
            continue
        if pending:
            pending += " " + line
            if pending.count("[") > pending.count("]"):
                continue
            line, pending = pending, ""
        if line.startswith("[") and not _BARE_KEY.match(line):
            table = doc
            for name in line.strip("[]").split("."):
                table = table.setdefault(name.strip(), {})
            continue
        key, _, value = line.partition("=")
        if value.strip().startswith("[") and value.count("[") > value.count("]"):
            pending = line
            continue
        table[key.strip()] = _value(value)
    return doc


# -- metadata --------------------------------------------------------------------


def _project() -> Dict[str, Any]:
    return dict(read_pyproject()["project"])


def _dist_name(project: Dict[str, Any]) -> str:
    return f"{project['name'].replace('-', '_')}-{project['version']}"


def metadata_text(project: Dict[str, Any]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"Requires-Python: {project['requires-python']}",
        f"License: {project['license']['text']}",
        f"Keywords: {','.join(project.get('keywords', []))}",
    ]
    lines += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    return "\n".join(lines) + "\n"


def _sources() -> List[Tuple[str, bytes]]:
    """(name in the archive, content) of what the package installs."""
    files = []
    for path in sorted((SOURCE / PACKAGE).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and (path.suffix == ".py" or path.name == "py.typed"):
            files.append((path.relative_to(SOURCE).as_posix(), path.read_bytes()))
    for name in MODULES:
        files.append((name, (SOURCE / name).read_bytes()))
    return files


def _top_level(files: List[Tuple[str, bytes]]) -> List[str]:
    tops = set()
    for name, _ in files:
        first = name.split("/")[0]
        if first.endswith(".py"):
            tops.add(first[:-3])
        elif "/" in name:
            tops.add(first)
    return sorted(tops)


def _dist_info(project: Dict[str, Any], files: List[Tuple[str, bytes]]) -> List[Tuple[str, bytes]]:
    info = f"{_dist_name(project)}.dist-info"
    tops = _top_level(files)
    return [
        (f"{info}/METADATA", metadata_text(project).encode()),
        (f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: proctree_build\nRoot-Is-Purelib: true\nTag: {WHEEL_TAG}\n".encode()),
        (f"{info}/top_level.txt", ("\n".join(tops) + "\n").encode()),
    ]


# -- archives --------------------------------------------------------------------


def _epoch() -> int:
    # Reproducible archives: the same sources give the same bytes.
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _write_wheel(wheel_directory: str, files: List[Tuple[str, bytes]], project: Dict[str, Any]) -> str:
    name = f"{_dist_name(project)}-{WHEEL_TAG}.whl"
    info = f"{_dist_name(project)}.dist-info"
    entries = files + _dist_info(project, files)
    record = "".join(f"{n},{_record_hash(d)},{len(d)}\n" for n, d in entries) + f"{info}/RECORD,,\n"
    entries.append((f"{info}/RECORD", record.encode()))
    stamp = time.gmtime(_epoch())[:6]
    Path(wheel_directory).mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(Path(wheel_directory) / name, "w", zipfile.ZIP_DEFLATED) as whl:
        for entry, data in entries:
            zinfo = zipfile.ZipInfo(entry, date_time=stamp)
            zinfo.external_attr = 0o644 << 16
            zinfo.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(zinfo, data)
    return name


# -- PEP 517 / PEP 660 hooks -----------------------------------------------------


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    project = _project()
    for name, data in _dist_info(project, _sources()):
        path = Path(metadata_directory) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return f"{_dist_name(project)}.dist-info"


def build_wheel(
    wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None, metadata_directory: Optional[str] = None
) -> str:
    return _write_wheel(wheel_directory, _sources(), _project())


def build_editable(
    wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None, metadata_directory: Optional[str] = None
) -> str:
    # A .pth file puts this source directory on sys.path: edits apply at once.
    project = _project()
    files = [(f"__editable__.{_dist_name(project)}.pth", f"{SOURCE}\n".encode())]
    return _write_wheel(wheel_directory, files, project)


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    project = _project()
    base = _dist_name(project)
    files = [
        ("pyproject.toml", (SOURCE / "pyproject.toml").read_bytes()),
        ("PKG-INFO", metadata_text(project).encode()),
        (f"build_backend/{Path(__file__).name}", Path(__file__).read_bytes()),
    ] + _sources()
    Path(sdist_directory).mkdir(parents=True, exist_ok=True)
    name = f"{base}.tar.gz"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry, data in sorted(files):
            member = tarfile.TarInfo(f"{base}/{entry}")
            member.size, member.mtime, member.mode = len(data), _epoch(), 0o644
            tar.addfile(member, io.BytesIO(data))
    with gzip.GzipFile(Path(sdist_directory) / name, "wb", mtime=_epoch()) as gz:
        gz.write(raw.getvalue())
    return name
