"""A store that hangs is not a wedged mount: no remount that breaks the readers the kernel serves from kept pages.

Our mount-s3 keeps the kernel's page cache across opens (FOPEN_KEEP_CACHE), so readers of files already read go
on reading from memory when the store stops answering.  The watchdog's probe needs the store (its lookup of a name
that cannot exist), so it times out, and the program, waiting on the store, shows no progress.  It used to read
"unresponsive" and be remounted, which did not help (the new program waits on the same store) and broke every
reader holding a file of the old mount (ENOTCONN).  Now the servers the program is connected to are asked
directly; silent, the mount reads "store-unreachable" and is left alone.

Everything is real: the session's SeaweedFS behind a real nginx proxy (the store), mountctl's mount-s3 with its
default keep-cache, its watchdog checking every second, readers in processes of their own.  The store hangs by
SIGSTOP of the proxy's process group: connections stay open and new ones complete in the kernel, nothing answers.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

from mountctl import Mount, MountSpec

from far_store_readers import Readers, far_store, require_far_store_mount_s3, tear_down

FILES = 4
SIZE = 4 << 20
READERS = 4
HUNG_FOR_S = 10  # the watchdog checks every second meanwhile
BACK_WITHIN_S = 30


def test_a_store_that_hangs_is_waited_for_and_readers_of_kept_pages_keep_reading(local_s3, tmp_path, mount_root):
    require_far_store_mount_s3()
    with far_store(local_s3, str(tmp_path), "hang", FILES, SIZE) as (store, bucket):
        spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend="mount-s3", warm="off")
        mount = Mount(spec, settings=store.settings, watchdog=True, watchdog_interval_s=1.0)
        readers: Readers | None = None
        try:
            mount.start()
            pid = mount.pid
            # A pause after each file: a training step, and a machine shared with other tests.
            readers = Readers(mount.path, store.names, READERS, pause_s=0.05)
            deadline = time.monotonic() + 60  # every reader has read every file twice: from here on, kept pages
            while readers.served < 2 * READERS * FILES * SIZE and not readers.errors and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not readers.errors and readers.served >= 2 * READERS * FILES * SIZE, readers.errors[:2]
            store.stop()  # the store hangs from now on
            served_before, hung_at, hung_since = readers.served, time.monotonic(), time.time()
            time.sleep(HUNG_FOR_S)
            served = readers.served - served_before
            during = [(e["event"], e["detail"]) for e in mount.events if e["time"] >= hung_since]
            store.resume()
            back = time.monotonic() + BACK_WITHIN_S
            while not any(e["event"] == "store-answering" for e in mount.events) and time.monotonic() < back:
                time.sleep(0.2)
            health = mount.health()
            kinds = [kind for kind, _ in during]
            print(f"\n[store hung {time.monotonic() - hung_at:.0f}s] readers got {served} bytes from kept pages; "
                  f"events while hung: {kinds}; after: {[e['event'] for e in mount.events][-2:]}, {health.state}")
            assert not readers.errors, (readers.errors[:2], during)
            assert served > 0, f"the readers got nothing from the kept pages in the {HUNG_FOR_S} s the store hung"
            assert mount.restarts == 0 and mount.pid == pid, during
            assert not [kind for kind in kinds if kind in ("unresponsive", "remounted", "restart-failed")], during
            assert kinds.count("store-unreachable") == 1, during  # once per episode, not every check
            detail = dict(during)["store-unreachable"]
            assert urlsplit(store.endpoint).netloc in detail and "check that store" in detail, detail
            assert not [secret for secret in (store.settings.access_key_id, store.settings.secret_access_key)
                        if secret and secret in detail]
            assert any(e["event"] == "store-answering" for e in mount.events), mount.events[-3:]
            assert health.state == "healthy", health
        finally:
            tear_down(store, readers, mount)
