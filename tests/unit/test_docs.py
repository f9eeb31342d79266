"""The documentation stays true to the tree: README.md and docs/ link only to what exists, the commands
their code blocks show still exist (checked against the real argparse parsers and files), and the MkDocs
site builds with --strict. A renamed flag, a moved page or a deleted script fails here, not in a user's shell.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^(`{3,}|~{3,})\s*(\w*)")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")
_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_OUTPUT = re.compile(r"^(mountctl|resnet\.py)( [\w-]+)*: ")  # what a command printed: `resnet.py train: error: ...`
_ANGLED = re.compile(r"<([^<>\s]+)>")
_URI_PLACEHOLDER = re.compile(r"^([a-z][a-z0-9+]*://)([A-Z][A-Z0-9_]*)(?=/|$)")
_ELIDED = "..."  # `mountctl mount ... --warm LIST`: a command shown in part is checked for its names only


def _prose_and_blocks(page: Path) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Split a page into its prose lines and its fenced code blocks (language, lines)."""
    prose: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    fence: str | None = None
    for line in page.read_text().splitlines():
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
            blocks.append((opened.group(2), []))
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is not None:
            blocks[-1][1].append(line)
        else:
            prose.append(line)
    return prose, blocks


def _anchors(page: Path) -> set[str]:
    """The ids MkDocs (Python-Markdown's toc) gives the page's headings."""
    prose, _ = _prose_and_blocks(page)
    titles = [m.group(1) for m in (re.match(r"^#{1,6}\s+(.*?)\s*#*$", line) for line in prose) if m]
    return {slugify(re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", title), "-") for title in titles}


def _relative_links(page: Path) -> Iterator[str]:
    prose, _ = _prose_and_blocks(page)
    for line in prose:
        for target in _LINK.findall(_INLINE_CODE.sub("", line)):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not ours to check
                yield target


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_its_anchor(page: Path) -> None:
    broken = []
    for target in _relative_links(page):
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if where == ROOT / "docs" / "benchmark-figures.md":  # the site's page is BENCHMARKS.md (benchmarks/docs_page.py)
            where = ROOT / "BENCHMARKS.md"
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
            broken.append(f"{target}: no heading gives #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)} links to what is not there: {broken}"


def _shell_commands(lines: list[str]) -> Iterator[list[str]]:
    """Each simple command of a shell block as words: continuations joined, here-documents and comments
    dropped, `$(...)` substitutions and `a && b | c` split into their own commands, `<placeholder>` a word."""
    joined: list[str] = []
    for line in lines:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + line.strip()
        else:
            joined.append(line)
    heredoc_end = None
    for line in joined:
        if heredoc_end is not None:
            heredoc_end = None if line.strip() == heredoc_end else heredoc_end
            continue
        marker = _HEREDOC.search(line)
        if marker:
            heredoc_end, line = marker.group(1), line[:marker.start()]
        line = _ANGLED.sub(lambda m: re.sub(r"\W+", "-", m.group(1)).strip("-"), line)  # `<dir>`: a word, no redirect
        pieces = [line]
        while (inner := _SUBSTITUTION.search(pieces[0])) is not None:
            pieces.append(inner.group(1))
            pieces[0] = pieces[0][:inner.start()] + "SUBSTITUTED" + pieces[0][inner.end():]
        for piece in pieces:
            lexer = shlex.shlex(piece, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words: list[str] = []
            for token in [*lexer, ";"]:
                if token in _SEPARATORS:
                    while words and _ASSIGNMENT.match(words[0]):
                        words = words[1:]
                    if words:
                        yield words
                    words = []
                else:
                    words.append(token)


def _command_lines(language: str, lines: list[str]) -> list[str]:
    """The lines of a fenced block that a user types: a shell block's (in a transcript, those after `$ ` and their
    continuations, not what the program printed), and the `mountctl` lines a YAML manifest runs."""
    if language == "yaml":
        return [line.strip() for line in lines if re.match(r"^\s*mountctl\s", line)]
    if language not in ("bash", "sh", "shell", "console", ""):
        return []
    if not any(line.startswith("$ ") for line in lines):
        return [line for line in lines if not _OUTPUT.match(line)]
    typed: list[str] = []
    for line in lines:
        if line.startswith("$ ") or (typed and typed[-1].endswith("\\")):
            typed.append(line.removeprefix("$ "))
    return typed


def _concrete(word: str) -> str:
    """A bucket placeholder made a valid name: `s3://BUCKET/PREFIX/` -> `s3://bucket/PREFIX/` (a prefix is free)."""
    return _URI_PLACEHOLDER.sub(lambda m: m.group(1) + m.group(2).lower().replace("_", "-"), word)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _problems_with(words: list[str], parser: argparse.ArgumentParser, prog: str) -> list[str]:
    """What in `words` (a command's arguments) the real parser does not know: a subcommand or a flag."""
    options = set(parser._option_string_actions)
    for i, word in enumerate(words):
        subcommands = _subcommands(parser)
        if subcommands and not word.startswith("-"):
            if word not in subcommands:
                return [f"{prog}: no subcommand {word!r} (has {sorted(subcommands)})"]
            return _problems_with(words[i + 1:], subcommands[word], f"{prog} {word}")
    flags = [word.split("=", 1)[0] for word in words if word.startswith("--") and word != "--"]
    return [f"{prog}: no option {flag}" for flag in flags if flag not in options]


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from mountctl.cli import _parser
    from resnet import build_parser
    return {"mountctl": _parser(), "resnet.py": build_parser()}


def _dry_run(program: str, argv: list[str], parsers: dict[str, argparse.ArgumentParser]) -> list[str]:
    """Run the program's own dry run on `argv`: the real parser, then the config the command would run, built and
    checked with nothing started. A command shown in part (`...`) is checked for its subcommand and options only."""
    from mountctl import MountctlError
    from mountctl.cli import configure as mountctl_configure
    from resnet import configure as resnet_configure

    if _ELIDED in argv:
        return _problems_with(argv, parsers[program], program)
    argv = [_concrete(word) for word in argv]
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            (mountctl_configure if program == "mountctl" else resnet_configure)(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):  # --help is fine
            return [f"{program}: usage error: {errors.getvalue().strip()}"]
    except MountctlError as exc:
        return [f"{program}: {type(exc).__name__}: {exc}"]
    return []


def _check_command(words: list[str], parsers: dict[str, argparse.ArgumentParser]) -> list[str]:
    """Find the program in a command (also behind python, torchrun, srun, env) and dry-run its arguments."""
    for i, word in enumerate(words):
        name = Path(word).name
        if name == "mountctl" or (word == "-m" and words[i + 1:i + 2] == ["mountctl"]):
            start = i + (2 if word == "-m" else 1)
            return _dry_run("mountctl", words[start:], parsers)
        if name == "resnet.py":
            missing = [] if (ROOT / word).exists() else [f"{word}: no such file"]
            return missing + _dry_run("resnet.py", words[i + 1:], parsers)
        if re.match(r"^(\./)?(scripts|examples|tests|\.ci|benchmarks)/\S+$", word):
            if not (ROOT / word).exists():
                return [f"{word}: no such file"]
            if name == "bench.sh":  # runs `resnet.py bench s3://mountctl/bench/ "$@"`
                return _dry_run("resnet.py", ["bench", "s3://mountctl/bench/", *words[i + 1:]], parsers)
            return []
    return []


@pytest.mark.parametrize("page", [p for p in PAGES if not p.is_symlink()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_in_the_code_blocks_parses_and_passes_its_dry_run(page: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each command a page prints is parsed by the real parser and checked as the command checks it before it starts
    anything (`configure`): a renamed flag, a missing default or a value the command refuses fails here."""
    monkeypatch.chdir(tmp_path)  # relative paths in a command (--sample-log samples.log) land in a scratch directory
    parsers = _parsers()
    _, blocks = _prose_and_blocks(page)
    problems = []
    for language, lines in blocks:
        for words in _shell_commands(_command_lines(language, lines)):
            problems += [f"{shlex.join(words)}\n    {p}" for p in _check_command(words, parsers)]
    assert not problems, f"{page.relative_to(ROOT)} shows commands that do not run:\n" + "\n".join(problems)


def test_the_readme_shows_both_commands_and_ci_runs_the_test_one() -> None:
    """The two commands a newcomer needs stay on the README's first screen, and CI runs the second."""
    _, blocks = _prose_and_blocks(ROOT / "README.md")
    commands = [shlex.join(words) for _, lines in blocks[:1] for words in _shell_commands(lines)]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    assert "exec bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize(("line", "expected"), [
    # what does not exist
    ("python resnet.py trian s3://bucket/p/", "invalid choice: 'trian'"),
    ("mountctl mount s3://bucket/ /tmp/m --backend-x rclone", "unrecognized arguments: --backend-x"),
    ('eval "$(mountctl local-s3 environment)"', "invalid choice: 'environment'"),
    ("cd /tmp && bash scripts/no-such-script.sh", "scripts/no-such-script.sh: no such file"),
    ("MOUNTCTL_STORE=far bash benchmarks/bench.sh --quick --no-such-flag", "unrecognized arguments: --no-such-flag"),
    ("torchrun --nnodes 2 resnet.py train s3://bucket/p/ --num-nodes 2 --devicez 4", "unrecognized arguments: --devicez"),
    ("mountctl mount ... --warmm files.txt", "no option --warmm"),
    # what parses but the command refuses before it starts (the dry run); placeholders stand for valid values
    ("python resnet.py make s3://BUCKET/PREFIX/", "required: --num-images"),
    ("python resnet.py train s3://BUCKET/p/ --batch-size 0", "--batch-size must be at least 1"),
    ("mountctl mount s3://my-bucket/ <dir> --warm", "add --cache-dir"),
    ("mountctl local-s3 start --latency-ms 30", "add --profile far"),
    ("bash benchmarks/bench.sh --far-latency-ms -1", "far profile: latency_ms"),
])
def test_the_command_check_catches_what_would_not_run(line: str, expected: str) -> None:
    """The checker itself must fail on a command that would not run, or the test of the pages could never fail."""
    parsers = _parsers()
    found = [problem for words in _shell_commands([line]) for problem in _check_command(words, parsers)]
    assert len(found) == 1 and expected in found[0], found


def test_the_command_check_passes_what_would_run() -> None:
    parsers = _parsers()
    fine = ["python resnet.py train s3://b-1/p/ --source-kind s3io \\", "    --max-epochs 1 | tee log",
            "mountctl local-s3 start --profile far --latency-ms 30", "python - x <<'PY'", "mountctl nonsense", "PY",
            "mountctl mount s3://BUCKET/train/ <dir> --read-write", "python resnet.py --help"]
    assert [p for words in _shell_commands(fine) for p in _check_command(words, parsers)] == []


def test_a_transcript_is_checked_for_what_was_typed_not_what_was_printed() -> None:
    transcript = ["$ python resnet.py index s3://bucket/train/ \\", "    --index-out idx.json",
                  "resnet.py index: error: could not write the index", "$ mountctl status"]
    assert _command_lines("", transcript) == ["python resnet.py index s3://bucket/train/ \\", "    --index-out idx.json",
                                              "mountctl status"]
    assert _command_lines("", ["resnet.py train: error: shard changed", "python resnet.py demo"]) == [
        "python resnet.py demo"]
    assert _command_lines("yaml", ["  args:", "    - |", "      mountctl cleanup"]) == ["mountctl cleanup"]


def test_the_mkdocs_site_builds_strictly(tmp_path: Path) -> None:
    """Every page in the nav exists, every page is in the nav, and no link or anchor is broken."""
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                            "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "cli" / "index.html").is_file()


def test_the_layout_page_names_every_package_and_module() -> None:
    """docs/layout.md is the map of the code: a module or package added, moved or renamed without it fails here."""
    _, blocks = _prose_and_blocks(ROOT / "docs" / "layout.md")
    words = {word.rstrip(",;:") for _, lines in blocks for line in lines for word in line.split()}
    missing = []
    for base in (ROOT / "mountctl", ROOT / "benchmarks"):
        for path in sorted(base.rglob("*.py")):
            if "lab" in path.relative_to(ROOT).parts:
                continue  # the lab has a README of its own
            if path.name == "__init__.py":
                if path.parent.name + "/" not in words:
                    missing.append(str(path.parent.relative_to(ROOT)) + "/")
            elif path.name not in words and path.stem not in words:
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"docs/layout.md does not name: {missing}"
