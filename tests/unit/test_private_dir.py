"""``$MOUNTCTL_HOME`` and its private directories belong to the user who runs mountctl, or are refused."""

from __future__ import annotations

import os
import stat

import pytest

from mountctl.errors import RegistryError
from mountctl.paths import private_dir

NOBODY = 65534


def test_a_new_private_dir_is_made_0700(tmp_path, monkeypatch):
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path / "home"))
    path = private_dir("run")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700 and stat.S_IMODE(os.stat(tmp_path / "home").st_mode) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory another user owns needs root")
@pytest.mark.parametrize("whose", ["home", "part", "link"])
def test_a_directory_another_user_made_first_is_refused_not_taken_over(whose, tmp_path, monkeypatch):
    """As root, chmod and use would succeed silently on it: the records would live where that user can change them."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chmod(theirs, 0o777)
    os.chown(theirs, NOBODY, NOBODY)
    home = tmp_path / "home"
    if whose == "home":
        home = theirs
    elif whose == "part":
        home.mkdir(mode=0o700)
        (home / "run").mkdir()
        os.chown(home / "run", NOBODY, NOBODY)
    else:
        os.symlink(theirs, home)
    monkeypatch.setenv("MOUNTCTL_HOME", str(home))
    with pytest.raises(RegistryError, match="not a directory of yours"):
        private_dir("run")
    assert stat.S_IMODE(os.stat(theirs).st_mode) == 0o777  # left as it was
