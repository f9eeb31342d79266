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
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InvalidSpec
from ..paths import private_dir, write_private

__all__ = ["ListedObject", "write_object_list", "read_object_list"]


@dataclass(frozen=True)
class ListedObject:
    key: str  # relative to the mounted prefix
    etag: str  # as S3 returns it (quoted); quotes are added where missing
    size: int

    def line(self) -> str:
        if not self.key or any(c in self.key for c in "\t\n\r") or self.key.endswith("/"):
            raise InvalidSpec(f"object key {self.key!r} cannot be listed: it is empty, ends in '/' or holds a tab or "
                              "newline")
        if not self.etag or any(c in self.etag for c in "\t\n\r"):
            raise InvalidSpec(f"object {self.key!r} has no usable ETag ({self.etag!r}): index the dataset again "
                              "so that each object's ETag is recorded")
        etag = self.etag if self.etag.startswith('"') else f'"{self.etag}"'
        return f"{self.key}\t{etag}\t{int(self.size)}\n"


def write_object_list(objects: Iterable[ListedObject]) -> str:
    """The list's path under ``$MOUNTCTL_HOME/objects/`` (0600, named by its digest); written only if new."""
    text = "".join(obj.line() for obj in sorted(objects, key=lambda o: o.key))
    if not text:
        raise InvalidSpec("an object list needs at least one object")
    path = os.path.join(private_dir("objects"), hashlib.sha256(text.encode()).hexdigest()[:32] + ".tsv")
    if not os.path.exists(path):
        write_private(path, text)
    return path


def read_object_list(path: str) -> list[ListedObject]:
    """The objects a list names; a malformed line is refused in one message naming it."""
    found = []
    if not os.path.isfile(path):
        raise InvalidSpec(f"object list {path} does not exist: write one with mountctl.write_object_list, or give "
                          "the path of a key<TAB>etag<TAB>size file")
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3 or not fields[2].isdigit():
                raise InvalidSpec(f"object list {path}, line {number}: expected key<TAB>etag<TAB>size")
            found.append(ListedObject(fields[0], fields[1], int(fields[2])))
    return found
