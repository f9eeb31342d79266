"""mountctl: S3 served to PyTorch loaders as plain files through supervised FUSE mounts.

The public API is what ``__all__`` lists; every other module is private.
This package never imports torch; the training side lives in ``mountctl.torch``.
"""

from .api import mount
from .errors import (
    AlreadyMounted,
    BackendNotFound,
    BucketNotFound,
    CredentialsError,
    EndpointUnreachable,
    InvalidSpec,
    LocalS3Error,
    MountDirError,
    MountError,
    MountFailed,
    MountTimeout,
    RegistryError,
    StaleMount,
)
from .local_s3 import LocalS3
from .resilient import open_resilient
from .s3env import S3Settings, resolve
from .spec import MountSpec
from .supervisor import Health, Mount

__all__ = [
    "mount",
    "open_resilient",
    "Mount",
    "MountSpec",
    "Health",
    "LocalS3",
    "S3Settings",
    "resolve",
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
__version__ = "0.1.0"
