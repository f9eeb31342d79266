#!/usr/bin/env python3
"""ResNet-50 on WebDataset shards in S3: ``python resnet.py make|train|demo --help``.

The command line lives in ``mountctl/pytorch/cli.py``; this file keeps the
commands users know from the Mountpoint PyTorch example working as written.
"""

import sys

from mountctl.venv_guard import TRAINING_MODULES, require_modules

if __name__ == "__main__":
    require_modules("resnet.py", TRAINING_MODULES)  # a Python without torch stops here, in one line
    from mountctl.pytorch.cli import main

    sys.exit(main())
