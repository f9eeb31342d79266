"""MkDocs hook: the site's "Figures measured here" page is BENCHMARKS.md itself, read at build time.

The report is generated once, at the repository's top (benchmarks/benchmarks_md.py); a second committed copy
for the site went stale the day one of them was edited. Its links point into docs/ from the top, so they are
rebased for a page that lives in docs/.
"""

from __future__ import annotations

import os
from typing import Any

PAGE = "benchmark-figures.md"


def site_text(report: str) -> str:
    """BENCHMARKS.md's text as a page of the site: ``](docs/x)`` from the top is ``](x)`` from docs/."""
    return report.replace("](docs/", "](")


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    root = os.path.dirname(os.path.abspath(config.config_file_path))
    with open(os.path.join(root, "BENCHMARKS.md"), encoding="utf-8") as f:
        files.append(File.generated(config, PAGE, content=site_text(f.read())))
    return files
