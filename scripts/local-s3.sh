# Sourced by demo.sh and bench.sh: start the embedded local S3 unless it already runs, point the
# AWS variables at it, and let the caller stop it again only if this script started it.
started_local_s3=0
if ! mountctl local-s3 status >/dev/null; then started_local_s3=1; fi
mountctl local-s3 start
eval "$(mountctl local-s3 env)"

stop_local_s3_if_started() {
  if [ "$started_local_s3" = 1 ]; then mountctl local-s3 stop || true; fi
}
