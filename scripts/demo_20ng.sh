#!/usr/bin/env bash
# Install pcem-spark and run the 20 Newsgroups demo end to end on local Spark:
# ingest -> train PCEM on the archive's train split with 1% of labels -> predict
# the test split -> evaluate. Outputs go to out/demo/ (override with OUT=...).
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac  # the header above, no work
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-out/demo}
ARCHIVE=${ARCHIVE:-../shared/data/20news-bydate.tar.gz}
if [ ! -f "$ARCHIVE" ]; then
  ARCHIVE=out/20news-bydate.tar.gz
  [ -f "$ARCHIVE" ] || bash scripts/fetch_20ng.sh "$ARCHIVE"
fi
"$PY" -m pip install --quiet -e .
mkdir -p "$OUT"
start=$(date +%s)
"$PY" -m pcem_spark.cli ingest-20ng --archive "$ARCHIVE" --output "$OUT/20ng.jsonl.gz" --overwrite
"$PY" -m pcem_spark.cli train --config conf/20ng.toml --docs "$OUT/20ng.jsonl.gz" --split train --label-rate 0.01 --seed 0 \
  --model "$OUT/model" --overwrite
"$PY" -m pcem_spark.cli predict --config conf/20ng.toml --model "$OUT/model" --docs "$OUT/20ng.jsonl.gz" --split test \
  --output "$OUT/predictions" --overwrite
"$PY" -m pcem_spark.cli evaluate --config conf/20ng.toml --predictions "$OUT/predictions" --model "$OUT/model" \
  --output "$OUT/metrics.json" --overwrite
echo "demo finished in $(( $(date +%s) - start ))s; predictions: $OUT/predictions, metrics: $OUT/metrics.json"
