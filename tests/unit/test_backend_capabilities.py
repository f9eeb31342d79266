"""What a mount program can do is asked of its class: one list of names, no name compared outside backends/."""

from __future__ import annotations

import ast
import pathlib

import mountctl
from mountctl.mounts.backend_names import BACKEND_NAMES, MOUNT_PROGRAMS
from mountctl.mounts.backends import BACKENDS, MountS3, Rclone, S3fsFuse
from mountctl.mounts.spec import BACKEND_NAMES as SPEC_NAMES

ROOT = pathlib.Path(mountctl.__file__).parent


def test_the_one_list_of_names_is_the_backends_and_the_spec_s():
    assert tuple(BACKENDS) == MOUNT_PROGRAMS and SPEC_NAMES is BACKEND_NAMES
    assert mountctl.BACKEND_NAMES == ("auto", *MOUNT_PROGRAMS)


def test_each_program_says_what_it_can_do():
    mount_s3, rclone, s3fs = MountS3(), Rclone(), S3fsFuse()
    assert mount_s3.mounts_object_lists and mount_s3.warms_by_itself and mount_s3.bundled
    assert not mount_s3.overwrites_files and rclone.overwrites_files and s3fs.overwrites_files
    for other in (rclone, s3fs):
        assert not (other.mounts_object_lists or other.warms_by_itself or other.bundled)
    assert s3fs.program_figures("/nonexistent") == {} and mount_s3.program_figures("/nonexistent") == {}
    assert "error" in rclone.program_figures("/nonexistent")  # its remote control asked, and no answer


def _compared_names(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                found += [(node.lineno, v.value) for v in values
                          if isinstance(v, ast.Constant) and v.value in MOUNT_PROGRAMS]
    return found


def test_no_program_name_is_compared_to_a_string_outside_the_backends():
    offences = []
    for path in sorted(ROOT.rglob("*.py")):
        if "backends" in path.relative_to(ROOT).parts or path.name == "backend_names.py":
            continue
        offences += [f"{path.relative_to(ROOT)}:{line}: {name!r}" for line, name in
                     _compared_names(ast.parse(path.read_text()))]
    assert not offences, "ask the Backend class instead:\n" + "\n".join(offences)
