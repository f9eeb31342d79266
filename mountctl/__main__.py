"""``python -m mountctl``: the same as the ``mountctl`` command."""

import sys

from .venv_guard import CORE_MODULES, require_modules

require_modules("mountctl", CORE_MODULES)  # before the command: a system Python stops here, in one line

from .cli import main  # noqa: E402

sys.exit(main())
