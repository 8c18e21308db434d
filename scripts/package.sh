#!/usr/bin/env bash
# Build what a cluster needs (see docs/CLUSTER.md):
#   dist/pcem_spark.zip    this package, for spark-submit --py-files
#   dist/pcem_env.tar.gz   numpy/scipy/pyarrow/pandas at the driver's versions (venv-pack),
#                          for --archives dist/pcem_env.tar.gz#environment
#                          with --conf spark.pyspark.python=./environment/bin/python
# Usage: bash scripts/package.sh [--out dist] [--no-env] [--force] [--python python3.11]
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac  # the header above, no work
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# warc: FastWARC + Resiliparse for pcem ingest-warc (the executors need them too: see
# OPTIONAL_EXECUTOR_REQUIREMENTS in pcem_spark/ops/packaging.py, which packs them when installed here).
"$PY" -m pip install --quiet -e ".[cluster,warc]"
exec "$PY" -m pcem_spark.ops.packaging "$@"
