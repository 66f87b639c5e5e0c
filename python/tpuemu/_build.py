"""Builds the C++ shim (``tpuemu._C``) against the installed torch.

The shim is compiled with ``torch.utils.cpp_extension`` (g++ and ninja) into ``_cpp_build/``
next to this file; ``scripts/python.sh`` builds it ahead of time, and ``import tpuemu`` builds it
if it is missing, older than its sources, or built from another set of sources (a file added
or removed) or for another torch (under a minute on 2 cores, once: see `_units`).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = sorted((HERE / "csrc").glob("*.cpp"))
HEADERS = sorted((HERE / "csrc").glob("*.h"))
NAME = "tpuemu_C"


def build_dir() -> Path:
    """Where the shim is built: ``$TPUEMU_CPP_BUILD``, else the package's ``_cpp_build/``, else
    (a package directory the user cannot write, as a system-wide install) the user's cache,
    ``${XDG_CACHE_HOME:-~/.cache}/tpuemu/cpp_build``."""
    if "TPUEMU_CPP_BUILD" in os.environ:
        d = Path(os.environ["TPUEMU_CPP_BUILD"])
        d.mkdir(parents=True, exist_ok=True)
        return d
    d = HERE / "_cpp_build"
    try:
        d.mkdir(parents=True, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    d = cache / "tpuemu" / "cpp_build"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _built(d: Path) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES + [".so"]:
        p = d / (NAME + suffix)
        if p.exists():
            return p
    return None


def _manifest(d: Path) -> Path:
    """The names of the sources the shim in `d` was built from."""
    return d / "sources.txt"


def _names() -> str:
    """What the shim is built from: its sources' names and the installed torch's version (the
    shim is compiled against torch's headers: another torch, even a patch release, rebuilds
    it)."""
    return "\n".join(s.name for s in SOURCES + HEADERS) + f"\ntorch {torch_version()}\n"


def torch_version() -> str:
    """The installed torch's version, read without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "not installed"


def _stale(so: Path) -> bool:
    t = so.stat().st_mtime
    m = _manifest(so.parent)
    if not m.exists() or m.read_text() != _names():
        return True
    return any(s.stat().st_mtime > t for s in SOURCES + HEADERS)


def load(verbose: bool = False):
    """The shim module, built first if needed."""
    d = build_dir()
    so = _built(d)
    if so is None or _stale(so):
        return _compile(d, verbose)
    spec = importlib.util.spec_from_file_location(NAME, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _compile(d: Path, verbose: bool):
    from torch.utils import cpp_extension

    # ninja comes with the environment: make it findable when the environment is not activated.
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")

    if not verbose:
        print(f"tpuemu: compiling the C++ shim against torch {torch_version()} (once, under a "
              f"minute; cached in {d})...", file=sys.stderr)
    mod = cpp_extension.load(
        name=NAME,
        sources=[str(u) for u in _units(d)],
        extra_cflags=["-O2"],
        build_directory=str(d),
        verbose=verbose,
    )
    _manifest(d).write_text(_names())
    return mod


def _units(d: Path) -> list[Path]:
    """The translation units the shim is compiled as (written into `d`): the sources dealt
    into one unit per two cores, at least one, each unit ``#include``-ing its share. Every
    source includes torch's headers, whose parsing is most of a file's compile time: on the
    2-core machine the seven sources as one unit took 42 s of CPU (44 s wall), as seven units
    185 s of CPU (69 s wall), as two 65 s (37 s wall). The sources must not define the same
    internal name twice (a one-unit build, as on 2 cores, would not compile)."""
    n = max(1, min(len(SOURCES), (os.cpu_count() or 1) // 2))
    units = []
    for i in range(n):
        unit = d / f"unity_{i}.cpp"
        text = "".join(f'#include "{s}"\n' for s in SOURCES[i::n])
        if not unit.exists() or unit.read_text() != text:
            unit.write_text(text)
        units.append(unit)
    for old in d.glob("unity_*.cpp"):
        if old not in units:
            old.unlink()
    return units


def needs_build() -> bool:
    so = _built(build_dir())
    return so is None or _stale(so)


if __name__ == "__main__":
    # `python tpuemu/_build.py`: builds the shim if it is missing or stale (torch is imported
    # only then).
    if needs_build():
        # Importing torch autoloads the installed package, whose import builds the shim: build
        # here only what that left stale (it printed "compiling" twice, the second a no-op).
        import torch  # noqa: F401

        if needs_build():
            _compile(build_dir(), verbose="-v" in sys.argv)
        print(f"tpuemu: C++ shim built in {build_dir()}", file=sys.stderr)
