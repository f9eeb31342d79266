"""Known third-party notices are silenced one by one; a genuine warning still shows."""

from __future__ import annotations

import logging
import warnings

from mountctl.pytorch.notices import LIGHTNING_TIP_LOGGERS, quiet_known_notices

from torch_support import make_tiny_dataset, run_cli

LEAFSPEC = ("`isinstance(treespec, LeafSpec)` is deprecated, "
            "use `isinstance(treespec, TreeSpec) and treespec.is_leaf()` instead.")
LITLOGGER_TIP = ("💡 Tip: For seamless cloud logging and experiment tracking, try installing "
                 "[litlogger](https://pypi.org/project/litlogger/) to enable LitLogger.")


def _warn_as(module: str, message: str, category: type[Warning]) -> None:
    """Emit a warning attributed to ``module``, as if that library's code had raised it."""
    warnings.warn_explicit(message, category, filename=module.replace(".", "/") + ".py", lineno=1, module=module)


def test_the_leafspec_deprecation_is_silenced_but_a_genuine_warning_still_shows():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # what `python -W always` would do, before ours
        quiet_known_notices()  # inside: catch_warnings restores the filters when it exits
        _warn_as("lightning.pytorch.utilities._pytree", LEAFSPEC, FutureWarning)
        warnings.warn("genuine", UserWarning, stacklevel=1)
        _warn_as("mountctl.pytorch.somewhere", "something else is deprecated", FutureWarning)
    assert [str(w.message) for w in caught] == ["genuine", "something else is deprecated"]


def test_the_leafspec_filter_is_precise_about_who_warns():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_known_notices()
        _warn_as("somebody.else", LEAFSPEC, FutureWarning)
    assert [str(w.message) for w in caught] == [LEAFSPEC]


def test_lightning_tips_are_dropped_and_other_lightning_info_stays(caplog):
    quiet_known_notices()
    logger = logging.getLogger(LIGHTNING_TIP_LOGGERS[0])
    with caplog.at_level(logging.INFO, logger=logger.name):
        logger.info(LITLOGGER_TIP)
        logger.info("GPU available: False, used: False")
    assert [r.getMessage() for r in caplog.records] == ["GPU available: False, used: False"]


def test_train_prints_no_third_party_tip_or_deprecation_notice(s3_env, bucket):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=16)
    done = run_cli(["train", uri, "--source-kind", "s3io", "--batch-size", "8", "--precision", "32",
                    "--num-workers", "0", "--no-progress"])
    assert done.returncode == 0, done.stderr[-3000:]
    # With SLURM installed (setup.sh installs it for tests/test_slurm.py) Lightning also hinted at `srun`.
    for notice in ("litlogger", "litmodels", "tip:", "leafspec", "deprecat", "`srun` command is available"):
        assert notice not in done.stderr.lower(), done.stderr
