"""``VersionPin``: the one version of an S3 object a reader may join bytes from.

A reader that reopens an object at a byte offset (after a remount, an outage, a credential
refresh, a resume) must not glue the second half of a new version onto the first half of
the old one: the key stays, the ETag does not.  The pin holds the ETag the reader started
from (the dataset index's, or the one seen at the first open when the index has none) and
turns any other ETag, or S3's refusal of an ``If-Match``, into one ``ObjectChanged`` line
that names the object and says what to do.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ObjectChanged
from ..s3 import plain_etag

__all__ = ["VersionPin", "DEFAULT_REMEDY"]

DEFAULT_REMEDY = "rebuild the dataset's index of it, or restore the object, and start the read again"


class VersionPin:
    """The ETag an object is read at; ``etag_now`` asks S3 for the current one (None: the object is gone).

    ``etag_now`` raises while the store does not answer; callers decide whether that waits or passes.
    """

    def __init__(self, uri: str, etag: str | None = None, *, etag_now: Callable[[], str | None] | None = None,
                 remedy: str = DEFAULT_REMEDY) -> None:
        self.uri = uri
        self.etag = plain_etag(etag) if etag else None
        self._from_index = self.etag is not None
        self.remedy = remedy
        self._etag_now = etag_now

    @property
    def can_ask(self) -> bool:
        return self._etag_now is not None

    @property
    def if_match(self) -> str | None:
        """The value of an ``If-Match`` header for the pinned version (quoted, as HTTP wants it)."""
        return f'"{self.etag}"' if self.etag else None

    def check(self, current: str | None) -> None:
        """Pin ``current`` when nothing is pinned yet; raise ``ObjectChanged`` when it is another version."""
        if current is None:
            return
        current = plain_etag(current)
        if self.etag is None:
            self.etag = current
        elif current != self.etag:
            raise self.changed(current)

    def verify(self) -> bool:
        """Ask S3 (one HEAD through ``etag_now``) and ``check``; False when the store says the object is gone."""
        if self._etag_now is None:
            return True
        current = self._etag_now()
        if current is None:
            return False
        self.check(current)
        return True

    def changed(self, current: str | None = None) -> ObjectChanged:
        """The error for a changed object; ``current`` None when only a refused ``If-Match`` told us."""
        now = f"S3 now has ETag {current}" if current else "S3 refused a read of that version (If-Match)"
        where = "the dataset's index names" if self._from_index else "was seen when it was first opened"
        return ObjectChanged(f"{self.uri} was replaced: this run reads ETag {self.etag} ({where}), but {now}; "
                             f"reading on would join bytes of two versions; {self.remedy}",
                             uri=self.uri, expected_etag=self.etag, etag=current)
