"""Known, harmless third-party notices, each silenced precisely where it comes from.

Every entry names one message from one library and says why it does not
apply to us; anything else (a new deprecation, a real warning) still shows.
Never add a filter by category or module alone.
"""

from __future__ import annotations

import logging
import warnings

__all__ = ["quiet_known_notices", "resume_is_exact", "LIGHTNING_TIP_LOGGERS"]

# Lightning 2.6 prints its "💡 Tip: ... litlogger / litmodels" advertisements with
# rank_zero_info and has no setting to turn them off (Lightning-AI/pytorch-lightning
# issue #21294).  rank_zero_info logs through whichever of these loggers was
# installed last, so the filter sits on each of them.
LIGHTNING_TIP_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                         "lightning_utilities.core.rank_zero")
_LIGHTNING_TIPS = ("[litlogger](", "[litmodels](")


class _DropLightningTips(logging.Filter):
    """Drops Lightning's advertisements for its cloud services, and nothing else."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("💡 Tip:") and any(tip in message for tip in _LIGHTNING_TIPS))


def quiet_known_notices() -> None:
    """Silence the notices below; safe to call more than once."""
    for name in LIGHTNING_TIP_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropLightningTips) for f in logger.filters):
            logger.addFilter(_DropLightningTips())
    # Lightning's own flattening code builds torch's deprecated LeafSpec; nothing for us to change.
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning, module=r"lightning\.pytorch\.utilities\._pytree")
    # The dataset shards itself over workers (plan.py), which is what these warn about.
    warnings.filterwarnings("ignore", message=r".*IterableDataset.*has `__len__` defined.*")
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=r".*`use_distributed_sampler`.*")
    # Lightning warns whenever `srun` is on PATH and this process was not started by it: on a node with SLURM
    # installed, every bench cell and every single-process run printed it once per Trainer.  A job meant for
    # SLURM is launched as docs/slurm.md says, and then Lightning's SLURMEnvironment is used and no hint is due.
    warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")


def resume_is_exact() -> None:
    """Silence Lightning's "resuming from a checkpoint that ended before the epoch ended" warning.

    Called only when a checkpoint's data position has been loaded into our datamodule (datamodule.py):
    Lightning's check looks only at the loader, and the position travels in the datamodule's state, so
    the warning is false then.  A checkpoint without a data position still shows it.
    """
    warnings.filterwarnings("ignore", message=r"You're resuming from a checkpoint that ended before the epoch ended")
