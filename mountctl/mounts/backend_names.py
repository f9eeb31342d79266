"""The mount programs by name: the one list beneath ``MountSpec`` and the backends, and the two facts needed there.

What a program can do is asked of its class (``mounts.backends``: ``Backend.warms_by_itself``,
``overwrites_files``, ``mounts_object_lists``, ``bundled``, ``program_figures``).  Two of those answers are
needed beneath the classes, where ``MountSpec`` validates a request and ``programs.find_program`` looks a
program up, so they are kept here and the classes read them from here.
"""

from __future__ import annotations

__all__ = ["AUTO", "MOUNT_PROGRAMS", "BACKEND_NAMES", "OBJECT_LIST_PROGRAM", "BUNDLED_PROGRAMS"]

AUTO = "auto"  # not a program: the first installed one, in MOUNT_PROGRAMS' order
# ``auto``'s order too: why this order is said where it is used (``mounts/backends/__init__.py``).
MOUNT_PROGRAMS = ("mount-s3", "rclone", "s3fs")
BACKEND_NAMES = (AUTO, *MOUNT_PROGRAMS)
# The program that mounts a list of objects (mountctl's build's --manifest): MountSpec resolves ``auto`` to it.
OBJECT_LIST_PROGRAM = "mount-s3"
# Programs mountctl builds itself, into the venv's libexec/: found after PATH, never in the venv's bin.
BUNDLED_PROGRAMS = ("mount-s3",)
