"""The ``torch.backends`` entry point (python/pyproject.toml): ``import torch`` calls
:func:`load` at its end, which imports the package (registering the device).

A module of its own, not a function of the package: when a program imports tpuemu first, the
package's own ``import torch`` runs the entry point while the package is still being
initialised, and ``import tpuemu`` then just finds it in ``sys.modules``."""


def load() -> None:
    import tpuemu  # noqa: F401
