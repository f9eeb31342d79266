"""Which Python runs a command: a system Python without the project's packages stops in one line, not a traceback.

The README's commands (`python resnet.py ...`, `python -m mountctl ...`) run in the environment that
``scripts/setup.sh`` made, ``.venv`` beside ``resnet.py``.  Run with another Python they used to get as far as the
first missing import (`ModuleNotFoundError: No module named 'tqdm'`), or further with a wrong remedy.  They do not
re-run themselves with ``.venv``'s Python: a user who runs another environment on purpose keeps it, and the
remedy (activate it) also fixes the `mountctl: command not found` that the same shell would meet next.
Standard library only: it runs before any of the packages it looks for.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["require_modules", "CORE_MODULES", "TRAINING_MODULES"]

CORE_MODULES = ("boto3", "psutil")  # pyproject's dependencies (botocore comes with boto3)
TRAINING_MODULES = (*CORE_MODULES, "torch", "torchvision", "webdataset", "tqdm")  # a few of its `torch` extra

_ROOT = Path(__file__).resolve().parents[1]  # the clone (resnet.py, scripts/, .venv) when run from it


def require_modules(prog: str, modules: tuple[str, ...]) -> None:
    """Exit 1 with one line when this Python cannot import ``modules``; say how to get one that can."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if not missing:
        return
    venv = _ROOT / ".venv"
    if not (venv / "bin" / "python").exists():
        remedy = "set it up first: `bash scripts/setup.sh` in the repository root"
    elif Path(sys.prefix).resolve() == venv.resolve():
        remedy = "that environment is incomplete: run `bash scripts/setup.sh` again"
    else:
        where = os.path.relpath(venv) if _ROOT == Path.cwd().resolve() else str(venv)
        remedy = f"activate the project's environment first: `source {where}/bin/activate`"
    sys.exit(f"{prog}: error: this Python ({sys.executable}) has no {', '.join(missing)}; {remedy}")
