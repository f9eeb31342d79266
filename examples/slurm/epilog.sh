#!/bin/bash
# SLURM Epilog (slurm.conf: Epilog=/path/to/epilog.sh), run as root on each node when a job ends: clears what a
# killed job's mounts left behind for that job's user (dead mounts, records of dead supervisors, scratch
# directories). Live mounts of the user's other jobs on the node are left alone.
# Site settings, read from $MOUNTCTL_SLURM_ENV (default /etc/mountctl/slurm.env) when present:
#   MOUNTCTL_BIN        the mountctl command (default: mountctl on PATH)
#   MOUNTCTL_LOCAL_DIR  where train.sbatch keeps each user's per-node MOUNTCTL_HOME (default /tmp)
set -u
settings=${MOUNTCTL_SLURM_ENV:-/etc/mountctl/slurm.env}
# shellcheck disable=SC1090
[ -r "$settings" ] && . "$settings"
home="${MOUNTCTL_LOCAL_DIR:-/tmp}/mountctl-${SLURM_JOB_UID:?}-${SLURMD_NODENAME:-$(hostname -s)}"
[ -d "$home" ] || exit 0  # this user never mounted on this node
# Only a real directory of the job's user (train.sbatch makes it so): one another user made first is left alone.
if [ -L "$home" ] || [ "$(stat -c %u "$home")" != "$SLURM_JOB_UID" ]; then
    echo "mountctl epilog: $home is not a directory of user $SLURM_JOB_UID; left alone" >&2
    exit 0
fi
as_user=()
[ "$(id -u)" = "$SLURM_JOB_UID" ] || as_user=(runuser -u "${SLURM_JOB_USER:?}" --)
# Bounded: an epilog that hangs drains the node. A failed cleanup is logged, never fatal to the node.
if ! timeout 60 "${as_user[@]}" env MOUNTCTL_HOME="$home" "${MOUNTCTL_BIN:-mountctl}" cleanup; then
    echo "mountctl epilog: cleanup for job ${SLURM_JOB_ID:-?} user $SLURM_JOB_UID failed" >&2
fi
exit 0
