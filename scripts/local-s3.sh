# Sourced by demo.sh and bench.sh: start the embedded local S3 unless it already runs, point the
# AWS variables at it, and let the caller stop it again only if this script started it.
# MOUNTCTL_STORE=far puts the far-store proxy in front (S3's latency and per-connection rate);
# a proxy this script added to a server that already ran is removed again at the stop.
started_local_s3=0
added_far=0
if ! mountctl local-s3 status >/dev/null; then started_local_s3=1; fi
if [ "${MOUNTCTL_STORE:-local}" = far ]; then
  if ! mountctl local-s3 status 2>/dev/null | grep -q "profile far"; then added_far=1; fi
  mountctl local-s3 start --profile far
else
  mountctl local-s3 start
fi
eval "$(mountctl local-s3 env)"

stop_local_s3_if_started() {
  if [ "$started_local_s3" = 1 ]; then mountctl local-s3 stop || true
  elif [ "$added_far" = 1 ]; then mountctl local-s3 start --profile local || true; fi
}
