"""The ``tpuemu`` command that pip installs: the Rust command line (``tpuemu --help``) run from
the package's extension module, so no cargo is needed.

It is a package of its own so that the command starts without importing ``tpuemu`` (which
imports torch and loads the C++ shim): the extension module is loaded straight from the
installed ``tpuemu`` package's folder.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import signal
import sys
from pathlib import Path


def _extension():
    spec = importlib.util.find_spec("tpuemu")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("tpuemu: the tpuemu package is not installed")
    for folder in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder) / f"_rust{suffix}"
            if path.exists():
                loader = importlib.machinery.ExtensionFileLoader("tpuemu._rust", str(path))
                module_spec = importlib.util.spec_from_loader("tpuemu._rust", loader)
                module = importlib.util.module_from_spec(module_spec)
                loader.exec_module(module)
                return module
    raise SystemExit(f"tpuemu: no extension module (tpuemu/_rust*.so) in {spec.submodule_search_locations}")


def main() -> int:
    # As the Rust binary: Ctrl-C ends the command (Python's handler would wait for it to return).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    return _extension().cli_main(["tpuemu", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
