"""The layout is the architecture: one concept per module, no import cycles, a public surface the torch side keeps to."""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

import mountctl
from mountctl import s3

ROOT = pathlib.Path(mountctl.__file__).parent
REPO = ROOT.parent
# The library, and the benchmark harness beside it (outside the wheel, held to the same rules).
MODULES = sorted(ROOT.rglob("*.py")) + sorted((REPO / "benchmarks" / "harness").rglob("*.py"))


def _name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> list[tuple[str, list[str]]]:
    """(module, names) for every import in the file, relative ones made absolute."""
    package = _name(path) if path.name == "__init__.py" else _name(path).rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.append((base, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
    return found


def _targets(module: str, names: list[str], known: set[str]) -> set[str]:
    hits = {f"{module}.{n}" for n in names if f"{module}.{n}" in known}
    return hits or ({module} if module in known else set())


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_module_says_its_one_concept_on_its_first_line(path):
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    assert docstring and docstring.splitlines()[0].strip(), f"{path} has no first docstring line"


def test_no_import_cycles():
    known = {_name(p) for p in MODULES}
    graph = {_name(p): set().union(*[_targets(m, n, known) for m, n in _imports(p)] or [set()]) for p in MODULES}
    for module in graph:  # a package's own __init__ importing its children is not a cycle
        graph[module] = {t for t in graph[module] if not t.startswith(module + ".")}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                cycle = trail[trail.index(target):] + [target] if target in trail else [node, target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, trail + [target])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_torch_side_imports_only_public_names():
    public = {"mountctl": set(mountctl.__all__), "mountctl.s3": set(s3.__all__)}
    offences = []
    for path in (ROOT / "pytorch").rglob("*.py"):
        for module, names in _imports(path):
            if module == "mountctl" or module.startswith("mountctl.") and not module.startswith("mountctl.pytorch"):
                allowed = public.get(module)
                if allowed is None or not set(names) <= allowed:
                    offences.append(f"{path.relative_to(ROOT)}: from {module} import {', '.join(names)}")
    assert not offences, "private core modules used by the torch side:\n" + "\n".join(offences)


def test_the_core_never_imports_torch_at_module_level():
    for path in MODULES:
        if "pytorch" in path.parts or "benchmarks" in path.parts:  # the harness trains: torch is its business
            continue
        for node in ast.parse(path.read_text()).body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("torch", "lightning", "torchvision") for n in names), path


def test_the_torch_extra_declares_every_library_the_torch_side_imports():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    # The bench's peer cells import the peer libraries (declared in the peers extra).
    declared = {d.split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower()
                for d in project["dependencies"] + extras["torch"] + extras["peers"]}
    distribution = {"PIL": "pillow", "yaml": "pyyaml", "streaming": "streaming-community"}
    stdlib = set(sys.stdlib_module_names)
    used = set()
    for path in (ROOT / "pytorch").rglob("*.py"):
        for module, _ in _imports(path):
            top = module.split(".")[0]
            if top and top not in stdlib and top != "mountctl":
                used.add(distribution.get(top, top).lower())
    assert used - declared == set(), f"pyproject's torch extra lacks {sorted(used - declared)}"


def test_sharing_never_imports_observability():
    """observability/ reads shared/'s records; shared/ importing it back would make a supervisor load the exporter
    and, through the package's __init__, an import cycle that the graph above cannot see."""
    offences = [f"{path.relative_to(ROOT)}: {module}" for path in sorted((ROOT / "shared").rglob("*.py"))
                for module, _ in _imports(path) if module.startswith("mountctl.observability")]
    assert not offences, "shared/ imports observability/:\n" + "\n".join(offences)
