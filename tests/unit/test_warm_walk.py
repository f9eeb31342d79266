"""A warm whose walk could not list a folder never reports itself complete.

``os.walk`` drops listing errors unless told otherwise: a warm of a mount whose root could not be listed (a
mount torn down meanwhile, a dead FUSE connection) read nothing and reported a complete warm.  The real warm
child runs over a local directory; a root that is gone is the case a real mount produces on demand.
"""

from __future__ import annotations

from mountctl.mounts.warm import Warmer


def test_a_warm_of_a_root_that_cannot_be_listed_is_not_complete(tmp_path):
    report = Warmer(str(tmp_path / "gone"), timeout_s=60).start().wait()
    assert not report.complete
    assert report.failed and "cannot list it" in report.failed[0]
    assert "unreadable" in report.summary()


def test_an_automatic_warm_of_a_root_that_cannot_be_listed_is_not_complete(tmp_path):
    report = Warmer(str(tmp_path / "gone"), budget_bytes=1 << 20, only_if_fits=True, timeout_s=60).start().wait()
    assert not report.complete and report.failed


def test_a_readable_tree_is_warmed_whole_and_complete(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "x.jpg").write_bytes(b"z" * 100)
    report = Warmer(str(tmp_path), timeout_s=60).start().wait()
    assert report.complete and (report.files, report.bytes) == (2, 200)


def test_a_listed_name_that_starts_with_two_dots_is_read_and_one_that_climbs_out_is_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "..x.jpg").write_bytes(b"z" * 10)  # a name, not the parent
    (tmp_path / "outside.jpg").write_bytes(b"z" * 10)
    report = Warmer(str(root), ["..x.jpg", "../outside.jpg"], timeout_s=60).start().wait()
    assert (report.files, report.bytes) == (1, 10), report
    assert report.failed == ["../outside.jpg: outside the mount"], report.failed
