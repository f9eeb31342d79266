"""mountctl: S3 served to PyTorch loaders as plain files through supervised FUSE mounts.

The public API is what ``__all__`` lists, plus the module ``mountctl.s3``
(settings, URIs, clients, bucket checks); every other module is private and
may change.  This package never imports torch; the training side lives in
``mountctl.pytorch`` and imports only public names.
"""

from . import s3
from .argparsing import ArgumentParser
from .errors import (
    AlreadyMounted,
    BackendNotFound,
    BucketNotFound,
    CredentialsError,
    EndpointUnreachable,
    InvalidSpec,
    LocalS3Error,
    MountctlError,
    MountDirError,
    MountError,
    MountFailed,
    MountTimeout,
    ObjectChanged,
    RegistryError,
    S3Error,
    StaleMount,
)
from .local_s3.far_proxy import FarProfile, FarProxy
from .local_s3.ports import port_free
from .local_s3.server import LocalS3, uri_or_embedded
from .mounts.backends import backend_versions, get_backend, installed_backends
from .mounts.cache import cache_options, mount_cache_dir
from .mounts.handle import MountHandle
from .mounts.health import Health, HealthState
from .mounts.mount import Mount
from .mounts.object_list import ListedObject, read_object_list, write_object_list
from .mounts.object_version import VersionPin
from .mounts.resilient import open_resilient
from .mounts.spec import BACKEND_NAMES, MountSpec
from .mounts.warm import available_memory_bytes
from .observability import status
from .paths import private_dir
from .redaction import redact
from .s3 import S3Settings, S3Uri, parse_s3_uri, resolve
from .shared import SharedMount, mount

__all__ = [
    "ListedObject",
    "write_object_list",
    "read_object_list",
    "mount",
    "status",
    "open_resilient",
    "VersionPin",
    "cache_options",
    "mount_cache_dir",
    "private_dir",
    "available_memory_bytes",
    "Mount",
    "SharedMount",
    "MountHandle",
    "MountSpec",
    "BACKEND_NAMES",
    "installed_backends",
    "get_backend",
    "backend_versions",
    "Health",
    "HealthState",
    "LocalS3",
    "FarProxy",
    "FarProfile",
    "port_free",
    "uri_or_embedded",
    "S3Settings",
    "S3Uri",
    "parse_s3_uri",
    "resolve",
    "redact",
    "s3",
    "MountctlError",
    "InvalidSpec",
    "MountError",
    "BackendNotFound",
    "MountDirError",
    "AlreadyMounted",
    "MountTimeout",
    "MountFailed",
    "StaleMount",
    "RegistryError",
    "S3Error",
    "ObjectChanged",
    "CredentialsError",
    "BucketNotFound",
    "EndpointUnreachable",
    "LocalS3Error",
    "ArgumentParser",
]
__version__ = "0.2.0"
