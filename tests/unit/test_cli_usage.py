"""The command lines exit 1 on a usage error, as on any other error, and the version has one source."""

from __future__ import annotations

import pathlib

import pytest
import tomllib

import mountctl
from mountctl import ArgumentParser
from mountctl.cli import main


@pytest.mark.parametrize("argv", [[], ["mount"], ["mount", "s3://b/", "/tmp/x", "--backend", "nope"], ["frobnicate"],
                                  ["local-s3"], ["status", "--no-such-option"]])
def test_a_usage_error_exits_1_and_says_what_was_wrong(argv, capsys):
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("mountctl") and "error:" in err and "--help" in err and len(err.strip().splitlines()) == 1


def test_help_still_exits_0(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["--help"])
    assert raised.value.code == 0


def test_subparsers_inherit_the_exit_code():
    parser = ArgumentParser(prog="p")
    sub = parser.add_subparsers(dest="c", required=True).add_parser("x")
    sub.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as raised:
        parser.parse_args(["x", "--n", "many"])
    assert raised.value.code == 1


def test_the_package_version_is_read_from_mountctl_itself():
    project = tomllib.loads((pathlib.Path(mountctl.__file__).parent.parent / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "mountctl.__version__"}
    assert mountctl.__version__ == "0.2.0"


def test_backend_names_have_one_source():
    from mountctl.cli import _parser
    from mountctl.mounts.backends import BACKENDS
    from mountctl.mounts.spec import BACKEND_NAMES

    assert BACKEND_NAMES[0] == "auto" and set(BACKEND_NAMES[1:]) == set(BACKENDS)
    mount = _parser()._subparsers._group_actions[0].choices["mount"]
    backend = next(a for a in mount._actions if a.dest == "backend")
    assert tuple(backend.choices) == BACKEND_NAMES
