#!/bin/bash
# SLURM Prolog (slurm.conf: Prolog=/path/to/prolog.sh): the same cleanup as epilog.sh before a job starts, for
# what a crashed node or an epilog that never ran left behind (a dead mount would fail the job's first read).
exec "$(dirname "$(readlink -f "$0")")/epilog.sh"
