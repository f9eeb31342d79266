"""The benchmarks, kept out of the mountctl wheel: ``harness/`` is what ``resnet.py bench`` and ``demo`` run,
``lab/`` holds the one-question instruments that docs and tests cite, and ``benchmarks_md.py`` writes
BENCHMARKS.md from the harness's report files."""
