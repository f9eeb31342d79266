"""``python -m mountctl``: the same as the ``mountctl`` command."""

import sys

from .cli import main

sys.exit(main())
