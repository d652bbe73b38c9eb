"""Import the Work Queue Python module wherever CCTools put it.

Conda's CCTools ships ``ndcctools.work_queue``; Debian's ``python3-workqueue``
ships a top-level ``work_queue`` (made importable in the venv by
``scripts/setup.sh``). There is no usable PyPI package.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def load() -> ModuleType:
    """Return the work_queue module, or raise ImportError saying how to get it."""
    for name in ("ndcctools.work_queue", "work_queue"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(
        "the CCTools work_queue Python module is not importable: run scripts/setup.sh "
        "(installs Debian's python3-workqueue and links it into .venv)"
    )
