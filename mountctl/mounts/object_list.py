"""An object list: exactly the objects (key, ETag, size) a mount serves, with no LIST and no HEAD.

mountctl's mount-s3 takes it as ``--manifest`` (mountpoint-s3-fs's manifest mount): every lookup is answered
from the list, and every read carries the listed ETag, so an object replaced since the list was made can never
be read (the read fails with ESTALE). A dataset index holds exactly these facts; the training side writes its
list from the index (``Manifest.object_list``).

The file is one ``key<TAB>etag<TAB>size`` line per object, keys relative to the mounted prefix, written once
under ``$MOUNTCTL_HOME/objects/`` and named by its content's digest: two requests that list the same objects
name the same file, and a mount is shared only between requests that see the same objects.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InvalidSpec
from ..paths import private_dir, write_private
from ..processes import paths_in_use

__all__ = ["ListedObject", "write_object_list", "read_object_list", "key_problem", "sweep_unused_lists"]


# The most a size can be: mount-s3 reads it as a signed 64-bit count of bytes.
_MAX_SIZE = 2**63 - 1
_SIZE = re.compile(r"[0-9]+")
_REMEDY = ("write the list with mountctl.write_object_list or `resnet.py index`, one key<TAB>etag<TAB>size line "
           "per object")


def key_problem(key: str) -> str | None:
    """Why mount-s3 would refuse ``key`` in a list (the rules its own check applies), or None.

    One set of rules on both sides: the Rust front end checks the same before it mounts (mount-s3/src/manifest.rs),
    so a list this module writes or accepts is never refused late inside mount-s3."""
    if not key:
        return "an empty key"
    if any(c in key for c in "\t\n\r\0"):
        return "a key holding a tab, newline, carriage return or NUL"
    if key.startswith("/") or key.endswith("/"):
        return "a key that starts or ends with '/'"
    if any(part in ("", ".", "..") for part in key.split("/")):
        return "a key with an empty, '.' or '..' part"
    return None


def _check_all(objects: list[tuple[int, ListedObject]], where: str) -> None:
    """Refuse a key named twice, or one that is also another key's folder (``a`` and ``a/b``): mount-s3 cannot
    serve both, and found it only inside its database."""
    seen: dict[str, int] = {}
    for number, obj in objects:
        if obj.key in seen:
            raise InvalidSpec(f"{where}: {_at(number)}key {obj.key!r} is listed twice (first {_at(seen[obj.key])}"
                              f"); list each object once")
        seen[obj.key] = number
    for number, obj in objects:
        for i, c in enumerate(obj.key):
            if c == "/" and obj.key[:i] in seen:
                folder = obj.key[:i]
                raise InvalidSpec(f"{where}: {_at(number)}key {obj.key!r} lies under {folder!r}, which is listed as "
                                  f"an object ({_at(seen[folder]).strip()}); a mount cannot show both a file and a "
                                  "folder by one name: drop one of them")


def _at(number: int) -> str:
    return f"line {number}, " if number else ""


@dataclass(frozen=True)
class ListedObject:
    key: str  # relative to the mounted prefix
    etag: str  # as S3 returns it (quoted); quotes are added where missing
    size: int

    def line(self) -> str:
        problem = key_problem(self.key)
        if problem is not None:
            raise InvalidSpec(f"object key {self.key!r} cannot be listed: {problem}")
        if not 0 <= int(self.size) <= _MAX_SIZE:
            raise InvalidSpec(f"object {self.key!r} cannot be listed: its size {self.size} is not 0 to {_MAX_SIZE}")
        if not self.etag or any(c in self.etag for c in "\t\n\r\0"):
            raise InvalidSpec(f"object {self.key!r} has no usable ETag ({self.etag!r}): index the dataset again "
                              "so that each object's ETag is recorded")
        etag = self.etag if self.etag.startswith('"') else f'"{self.etag}"'
        return f"{self.key}\t{etag}\t{int(self.size)}\n"


def write_object_list(objects: Iterable[ListedObject]) -> str:
    """The list's path under ``$MOUNTCTL_HOME/objects/`` (0600, named by its digest); written only if new."""
    ordered = sorted(objects, key=lambda o: o.key)
    text = "".join(obj.line() for obj in ordered)
    if not text:
        raise InvalidSpec("an object list needs at least one object")
    _check_all([(0, obj) for obj in ordered], "object list")
    path = os.path.join(private_dir("objects"), hashlib.sha256(text.encode()).hexdigest()[:32] + ".tsv")
    try:
        os.utime(path)  # asked for again: the sweep's grace starts anew
    except FileNotFoundError:
        write_private(path, text)
    return path


def read_object_list(path: str) -> list[ListedObject]:
    """The objects a list names; the first line mount-s3 would refuse is refused here, in one message naming the
    file, the line, the key and what to do."""
    if not os.path.isfile(path):
        raise InvalidSpec(f"object list {path} does not exist: write one with mountctl.write_object_list, or give "
                          "the path of a key<TAB>etag<TAB>size file")
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise InvalidSpec(f"object list {path} is not UTF-8 text (byte {exc.start}); {_REMEDY}") from None
    found: list[tuple[int, ListedObject]] = []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the last line's own newline
    for number, line in enumerate(lines, 1):
        if line == "":
            continue  # only a completely empty line is skipped: a line of spaces is a malformed one
        where = f"object list {path}, line {number}"
        if "\r" in line:
            raise InvalidSpec(f"{where}: holds a carriage return (a CRLF file?); {_REMEDY}")
        fields = line.split("\t")
        if len(fields) != 3:
            raise InvalidSpec(f"{where}: expected key<TAB>etag<TAB>size, found {len(fields)} field(s); {_REMEDY}")
        key, etag, size = fields
        problem = key_problem(key)
        if problem is not None:
            raise InvalidSpec(f"{where}: {problem} ({key!r}), which mount-s3 cannot serve; {_REMEDY}")
        if not etag:
            raise InvalidSpec(f"{where}: key {key!r} has no ETag; index the dataset again so that each object's "
                              "ETag is recorded")
        if not _SIZE.fullmatch(size) or int(size) > _MAX_SIZE:
            raise InvalidSpec(f"{where}: key {key!r} has size {size!r}, not a whole number of bytes; {_REMEDY}")
        found.append((number, ListedObject(key, etag, int(size))))
    if not found:
        raise InvalidSpec(f"object list {path} names no object; {_REMEDY}")
    _check_all(found, f"object list {path}")
    return [obj for _, obj in found]


# A list younger than this is left alone by the sweep: it may have just been written for a mount about to start.
UNUSED_LIST_AGE_S = 3600.0


def sweep_unused_lists(min_age_s: float = UNUSED_LIST_AGE_S) -> list[str]:
    """Remove the lists under ``$MOUNTCTL_HOME/objects/`` that no live process uses and that were not written or
    asked for in the last ``min_age_s``; return what was removed (``mountctl cleanup``, and each mount's start).

    A list is written once per dataset and kept for the mounts that name it (a remount reads it again); nothing
    removed one whose mount was killed, so they piled up. In use is judged from the processes' open files: a
    ``Mount`` (a supervisor, or an in-process mount) holds its list open while the mount lives, also between a
    killed program and its remount, when no program names it; ``write_object_list`` touches a list it finds, so
    one about to be mounted again is young."""
    folder = private_dir("objects")
    now = time.time()
    old = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        try:
            if name.endswith(".tsv") and now - os.stat(path).st_mtime >= min_age_s:
                old.append(path)
        except OSError:
            continue
    if not old:
        return []
    used = paths_in_use(old)
    removed = []
    for path in old:
        if path in used:
            continue
        try:
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed
