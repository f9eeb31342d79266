"""The exceptions mountctl raises: one base, a branch for mounts, a branch for S3.

Every message says what failed, what was tried and what to do next; none
carries a secret (messages go through ``redact`` before they are built).
Errors also carry what a program needs to act on them (the mount program,
its log, the directory, the time bound) as attributes, and keep them when
pickled across a DataLoader worker or a process boundary.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "MountctlError",
    "InvalidSpec",
    "MountError",
    "BackendNotFound",
    "MountDirError",
    "AlreadyMounted",
    "MountDirGone",
    "MountTimeout",
    "MountFailed",
    "StaleMount",
    "RegistryError",
    "S3Error",
    "CredentialsError",
    "BucketNotFound",
    "EndpointUnreachable",
    "ObjectChanged",
    "LocalS3Error",
]


class MountctlError(Exception):
    """Base of every error mountctl raises on purpose.

    Keyword attributes (``program``, ``log_path``, ``mount_dir``, ``timeout_s``, ...)
    are set on the instance; absent ones read as None.
    """

    program: str | None = None
    log_path: str | None = None
    mount_dir: str | None = None
    timeout_s: float | None = None

    def __init__(self, message: str, *context: Any, **attributes: Any) -> None:
        # ``context``: what a library appended to ``args`` on the way (kept, so a pickled copy rebuilds).
        super().__init__(message, *context)
        for name, value in attributes.items():
            setattr(self, name, value)

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        # The message alone, even after a library appended its context to ``args`` (webdataset's tar
        # reader adds the stream and the URL), which would otherwise print as a tuple.
        return self.message


class InvalidSpec(MountctlError, ValueError):
    """A request that can never work as written (bad URI, option, backend name)."""


class MountError(MountctlError):
    """Base of the errors about mounting, serving and unmounting."""


class BackendNotFound(MountError):
    """The mount program for the requested backend is not installed."""


class MountDirError(MountError):
    """The mount directory cannot be used (a file, not empty, not creatable)."""


class MountDirGone(MountDirError):
    """The mount directory vanished or became unreachable (its parent file system went): nothing to remount."""


class AlreadyMounted(MountDirError):
    """Something live is already mounted at the mount directory, or it is managed for another request."""


class MountTimeout(MountError):
    """The mount did not become ready, or did not go away, within its time bound."""


class MountFailed(MountError):
    """The mount program exited or refused; the message carries its own error text."""


class StaleMount(MountError):
    """A dead FUSE mount (ENOTCONN) sits at the path and could not be cleared."""


class RegistryError(MountError):
    """The node-wide registry of shared mounts refused a request."""


class S3Error(MountctlError):
    """S3 itself refused or could not be reached."""


class CredentialsError(S3Error):
    """S3 rejected the credentials, or none could be found."""


class BucketNotFound(S3Error):
    """The bucket does not exist at the endpoint."""


class EndpointUnreachable(S3Error):
    """Nothing answered at the S3 endpoint."""


class ObjectChanged(S3Error):
    """An object was replaced while it was being read: its new bytes cannot be joined with those already read.

    ``uri`` names the object, ``expected_etag`` the version being read (from the dataset's index, or seen at
    the first open), ``etag`` the version S3 has now (None when only a refused ``If-Match`` said so).
    """

    uri: str | None = None
    expected_etag: str | None = None
    etag: str | None = None


class LocalS3Error(MountctlError):
    """The embedded local S3 server could not be started, stopped or found."""
