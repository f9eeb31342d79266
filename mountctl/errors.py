"""The exceptions mountctl raises.

Every message says what failed, what was tried and what to do next; none
carries a secret (messages go through ``redact`` before they are built).
"""

from __future__ import annotations

__all__ = [
    "MountError",
    "InvalidSpec",
    "BackendNotFound",
    "MountDirError",
    "AlreadyMounted",
    "MountTimeout",
    "MountFailed",
    "StaleMount",
    "CredentialsError",
    "BucketNotFound",
    "EndpointUnreachable",
    "LocalS3Error",
    "RegistryError",
]


class MountError(Exception):
    """Base of every error mountctl raises on purpose."""


class InvalidSpec(MountError, ValueError):
    """A mount request that can never work as written (bad URI, option, backend name)."""


class BackendNotFound(MountError):
    """The mount program for the requested backend is not installed."""


class MountDirError(MountError):
    """The mount directory cannot be used (a file, not empty, not creatable)."""


class AlreadyMounted(MountDirError):
    """Something live is already mounted at the mount directory."""


class MountTimeout(MountError):
    """The mount did not become ready, or did not go away, within its time bound."""


class MountFailed(MountError):
    """The mount program exited or refused; the message carries its own error text."""


class StaleMount(MountError):
    """A dead FUSE mount (ENOTCONN) sits at the path and could not be cleared."""


class CredentialsError(MountError):
    """S3 rejected the credentials, or none could be found."""


class BucketNotFound(MountError):
    """The bucket does not exist at the endpoint."""


class EndpointUnreachable(MountError):
    """Nothing answered at the S3 endpoint."""


class LocalS3Error(MountError):
    """The embedded local S3 server could not be started, stopped or found."""


class RegistryError(MountError):
    """The node-wide registry of shared mounts refused a request."""
