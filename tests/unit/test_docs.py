"""The documentation stays true to the tree: README.md and docs/ link only to what exists, the commands
their code blocks show still exist (checked against the real argparse parsers and files), and the MkDocs
site builds with --strict. A renamed flag, a moved page or a deleted script fails here, not in a user's shell.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
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


_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)  # a code span may wrap onto the next line of its paragraph
_REPO_PATH = re.compile(r"^(?:\./)?((?:[\w.-]+/)+[\w.-]+\.[A-Za-z0-9]+)$")  # `dir/file.ext`
_DOTTED_MODULE = re.compile(r"^(?:mountctl|benchmarks)(?:\.\w+)+$")  # `mountctl.mounts.warm`, `mountctl.S3Error`


def _code_spans(page: Path) -> Iterator[str]:
    """The text of each inline code span in the page's prose, paragraph by paragraph."""
    prose, _ = _prose_and_blocks(page)
    for paragraph in re.split(r"\n\s*\n", "\n".join(prose)):
        for match in _CODE_SPAN.finditer(paragraph):
            yield " ".join(match.group(2).split())


# The checkout's own top-level folders, as git tracks them: an ignored one (bench-results/, .venv/) holds what a
# run left on this machine, so a path into it names nothing a reader's clone has.
_TRACKED_TOP = {name.split("/", 1)[0] for name in subprocess.run(
    ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines() if "/" in name}


def _names_nothing(span: str) -> str | None:
    """Why a backticked repo path or dotted name names nothing in the tree, or None when it does or is not one.

    A path counts when its first folder is one at the checkout's top (`mountctl/`, `tests/`, `scripts/`, ...):
    `train/c0003/x.jpg` or `bin/rclone.xz` describe other trees. A dotted name counts when it starts with
    `mountctl.` or `benchmarks.`: its longest importable prefix is imported and the rest must be attributes."""
    if path := _REPO_PATH.match(span):
        relative = path.group(1)
        if relative.split("/")[0] in _TRACKED_TOP and not (ROOT / relative).exists():
            return f"`{span}`: no such file"
        return None
    if not _DOTTED_MODULE.match(span):
        return None
    parts = span.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for name in parts[end:]:
            if not hasattr(found, name):
                return f"`{span}`: {'.'.join(parts[:end])} has no {'.'.join(parts[end:])}"
            found = getattr(found, name)
        return None
    return f"`{span}`: no such module"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_backticked_path_and_module_names_something_in_the_tree(page: Path) -> None:
    """`mountctl/mounts/backends.py` outlived its move into a folder in two pages: a path in backticks is a link
    too, and goes stale the same way."""
    broken = [why for span in _code_spans(page) if (why := _names_nothing(span))]
    assert not broken, f"{page.relative_to(ROOT)} names what is not in the tree: {broken}"


@pytest.mark.parametrize(("span", "expected"), [
    ("mountctl/mounts/backends.py", "no such file"),
    ("./scripts/benchmarks_md.py", "no such file"),
    ("mountctl.object_list", "mountctl has no object_list"),
    ("mountctl.mounts.warm.no_such_name", "mountctl.mounts.warm has no no_such_name"),
    ("benchmarks.no_such_module", "benchmarks has no no_such_module"),
])
def test_the_path_check_catches_a_path_or_module_that_is_gone(span: str, expected: str) -> None:
    assert expected in (_names_nothing(span) or "")


@pytest.mark.parametrize("span", ["mountctl/mounts/backends/rclone.py", "mountctl.mounts.object_list",
                                  "mountctl.S3Error", "train/c0003/00000042.jpg", "DIR/version_N/metrics.csv",
                                  "mountctl mount s3://b/ DIR", "mountctl.mounts.warm"])
def test_the_path_check_passes_what_exists_or_is_no_repo_path(span: str) -> None:
    assert _names_nothing(span) is None


def test_a_code_span_that_wraps_onto_the_next_line_is_read_whole(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("A run `stops\nhere`. `scripts/no_such.py`\nleaves it.\n\n```bash\nls `x/y.py`\n```\n")
    assert list(_code_spans(page)) == ["stops here", "scripts/no_such.py"]


# Benchmark figures. A figure is a measured rate (a number with a rate unit), a ratio of two measurements (`0.92 x`)
# or an accelerator utilisation (`73 %` in a passage about AU), in prose or in a table column whose header names
# such a unit. Each must be one that a generated report holds (BENCHMARKS.md, which benchmarks/benchmarks_md.py
# writes from the bench's own report files): a figure typed by hand goes stale the day the bench runs again. Not
# figures: a bound or target (`at least 0.8 x`, `AU >= 90 %`), a setting or input (`50 MB/s per connection`, what
# a workload asks for), durations, sizes, counts, CPU shares, and what code spans and code blocks show. Figures
# measured by others are quoted from their source, named in _QUOTED_FROM_OTHERS.
_REPORTS = [ROOT / "BENCHMARKS.md"]
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_RATE_UNIT = r"(?:img|images|samples|objects|files|reads|requests)/s|[KMG]i?B/s"
_FIGURE = re.compile(
    rf"(?<![\w.,/^-])(?P<run>(?:{_NUMBER})(?:\s*(?:/|-|–|to|against)\s*(?:{_NUMBER}))*)\s?"
    rf"(?P<unit>(?:{_RATE_UNIT})(?![\w/])|x(?![\w-])(?!\s*\d)(?!\s+[A-Z])|×|%)")
_BOUND_BEFORE = re.compile(r"(?:≥|>=|≤|<=|>|<|\bat least|\bat most|\bunder|\bover|\babove|\bbelow|\bup to|\btarget|"
                           r"\bmore than|\bless than|\basks for|\bcapped at|\bthrottle,)\s*(?:\*\*)?$")
_SETTING_AFTER = re.compile(r"^\s*(?:(?:per|a|each)[ -]connection|per request|cap\b|of wanted)")
_AU_PASSAGE = re.compile(r"\bAU\b|accelerator utilisation")
_FASTER_AFTER = re.compile(r"^\s*(?:faster|slower|ahead|behind|more throughput)\b")  # `40 % faster`
_FIGURE_COLUMN = re.compile(rf"{_RATE_UNIT}|^x |\bAU %")
_FIGURE_ROW = re.compile(rf"(?:{_RATE_UNIT}|\bAU %)$")  # a table whose first column names the measure
# (page, figure as written): where it was measured, by others. Quote what a public source published; ours go to
# a report.
_QUOTED_FROM_OTHERS: dict[tuple[str, str], str] = {
}


def _report_numbers() -> set[str]:
    """Every number the generated reports print, as written without its thousands commas."""
    return {n.replace(",", "") for report in _REPORTS for n in re.findall(_NUMBER, report.read_text())}


def _passages(prose: list[str]) -> Iterator[str]:
    """A page's prose as passages: paragraphs and list items joined onto one line; each table row its own."""
    current: list[str] = []
    for line in [*prose, ""]:
        starts_item = re.match(r"^\s*(?:[-*+]|\d+\.)\s", line) or line.lstrip().startswith(("|", "#"))
        if not line.strip() or starts_item:
            if current:
                yield " ".join(current)
            current = []
        if line.strip():
            current.append(line.strip())
        if line.lstrip().startswith(("|", "#")):
            yield " ".join(current)
            current = []


def _numbers_in(text: str) -> list[str]:
    return re.findall(_NUMBER, text)


def _figures_in(text: str) -> list[str]:
    """The benchmark figures a passage of prose states, each as `number unit` (see the block comment above)."""
    text = _INLINE_CODE.sub(" ", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text is prose; its target is not
    found = []
    for match in _FIGURE.finditer(text):
        unit = match.group("unit")
        if unit == "%" and not (_AU_PASSAGE.search(text[max(0, match.start() - 60):match.end() + 30])
                                or text[max(0, match.start() - 1):match.start()] in ("+", "−")
                                or _FASTER_AFTER.match(text[match.end():])):
            continue  # a share of a cache, of CPU, of the time: not AU, and no gain or loss in speed
        before = text[max(0, match.start() - 30):match.start()]
        if _BOUND_BEFORE.search(before) or re.search(r"\bepochs? $", before):  # `epoch 1 samples/s`: an index
            continue
        if _SETTING_AFTER.match(text[match.end():]):
            continue
        found += [f"{number} {unit}" for number in _numbers_in(match.group("run"))]
    return found


def _table_figures(prose: list[str]) -> list[str]:
    """Figures in the cells of table columns whose header names a rate, a ratio or AU."""
    found: list[str] = []
    header: list[str] | None = None
    for line in [*prose, ""]:
        if not line.lstrip().startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
            row_names_a_unit = bool(cells) and bool(_FIGURE_ROW.search(cells[0].replace("*", "")))
            for column, (name, cell) in enumerate(zip(header, cells, strict=False)):
                if _FIGURE_COLUMN.search(name.replace("*", "")) or (row_names_a_unit and column > 0):
                    label = name if not row_names_a_unit else cells[0].replace("*", "")
                    found += [f"{n} ({label})" for n in _numbers_in(_INLINE_CODE.sub(" ", cell))]
    return found


def _unheld_figures(page_name: str, prose: list[str], held: set[str]) -> list[str]:
    figures = [f for passage in _passages(prose) for f in _figures_in(passage)] + _table_figures(prose)
    return [f for f in figures if not _held(f.split()[0], held) and (page_name, f) not in _QUOTED_FROM_OTHERS]


def _held(number: str, held: set[str]) -> bool:
    """The report prints rates and AU to one decimal and ratios to three, so a figure taken from it keeps its
    decimals; a whole number (`970`, `2 x`) matches some count or size in any report and is never taken as held."""
    return "." in number and number.replace(",", "") in held


@pytest.mark.parametrize("page", [p for p in PAGES if not p.is_symlink()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_benchmark_figure_is_one_a_generated_report_holds(page: Path) -> None:
    """Figures typed into prose went stale while the docs said they were "generated, never retyped": link to the
    section of BENCHMARKS.md that holds the figure instead, or quote what others published in _QUOTED_FROM_OTHERS."""
    prose, _ = _prose_and_blocks(page)
    name = str(page.relative_to(ROOT))
    unheld = _unheld_figures(name, prose, _report_numbers())
    assert not unheld, (f"{name} states benchmark figures that no generated report holds: {unheld}; link to the "
                        "BENCHMARKS.md section that holds each instead")


@pytest.mark.parametrize(("text", "expected"), [
    # the old text of docs/training.md, docs/scale.md, README.md and docs/standard-loaders.md
    ("| 12,000 images, 16 MB shards | mount-s3, read ahead (default) | **970** (1,462) | **1,289** |",
     ["970 (epoch 1 samples/s)", "1,462 (epoch 1 samples/s)", "1,289 (epoch 2 samples/s)"]),
    ("it lifted mount-s3's whole epoch 1 from 776 to 970 samples/s on 16 MB shards",
     ["776 samples/s", "970 samples/s"]),
    ("DLIO's AU was 73 % against local disk's 92 %, and 91 % once warmed", ["73 %", "92 %", "91 %"]),
    ("mount-s3 moves the most for 64 readers (0.65-0.70 x the store's limit)", ["0.65 x", "0.70 x"]),
    ("983 against 977 samples/s for the plain mount", ["983 samples/s", "977 samples/s"]),
    ("rclone was 2 x s3fs in epoch 1 and 7 x in epoch 2", ["2 x", "7 x"]),
    ("faster in every case (+24 % one reader), the side route 40 % ahead", ["24 %", "40 %"]),
    # what is not a figure
    ("the far store (20 ms per request, 50 MB/s per connection)", []),
    ("the kernel's block I/O throttle, 256 KiB/s for the mount-s3 process alone", []),
    ("a workload passes at AU ≥ 90 %; the target is at least 0.8 x the limit", []),
    ("8 x 64 MiB objects on 2 x AMD EPYC, CPU 77-99 % busy, 1,300 images in 4 shards, 90 % of the cache", []),
    ("the table's `samples/s e1` column, `0.9 x` in code", []),
])
def test_the_figure_check_finds_what_was_typed_by_hand(text: str, expected: list[str]) -> None:
    header = ["| dataset | route | epoch 1 samples/s | epoch 2 samples/s |", "| --- | --- | --- | --- |"]
    prose = [*header, text] if text.startswith("|") else [text]
    assert _unheld_figures("docs/page.md", prose, held=set()) == expected


def test_a_figure_the_report_holds_passes_and_one_it_does_not_fails() -> None:
    held = _report_numbers()
    # A figure of BENCHMARKS.md's loader table as it stands (its whole-epoch samples/s of local disk), and the
    # same figure a tenth off, which no report prints.
    page = (ROOT / "BENCHMARKS.md").read_text()
    figure = re.search(r"^\| loader \+ decode, 2 workers: whole epoch \| local-disk \| samples/s \| local disk \| "
                       r"([\d,]+\.\d)", page, re.M).group(1)
    assert figure.replace(",", "") in held
    off = next(f"{figure[:-1]}{d}" for d in "0123456789" if f"{figure[:-1]}{d}".replace(",", "") not in held)
    assert _unheld_figures("docs/page.md", [f"the whole epoch 1 at {figure} samples/s"], held) == []
    assert _unheld_figures("docs/page.md", [f"the whole epoch 1 at {off} samples/s"], held) == [f"{off} samples/s"]
    assert "2" in held and _unheld_figures("docs/page.md", ["rclone was 2 x s3fs"], held) == ["2 x"]
    rows = ["| measure | run 1 | run 2 |", "| --- | --- | --- |", "| **whole epoch, samples/s** | 388 / 409 | 1,185 |"]
    assert _unheld_figures("docs/page.md", rows, held) == [
        "388 (whole epoch, samples/s)", "409 (whole epoch, samples/s)", "1,185 (whole epoch, samples/s)"]


def test_a_figure_others_published_passes_only_where_its_source_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    line = ["Mountpoint's PyTorch example reports 526.9 images/s on a g5.2xlarge"]
    assert _unheld_figures("docs/page.md", line, held=set()) == ["526.9 images/s"]
    monkeypatch.setitem(_QUOTED_FROM_OTHERS, ("docs/page.md", "526.9 images/s"), "Mountpoint's PyTorch example")
    assert _unheld_figures("docs/page.md", line, held=set()) == []


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
    ("mountctl mount s3://my-bucket/ <dir> --warm --backend rclone", "add --cache-dir"),
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
