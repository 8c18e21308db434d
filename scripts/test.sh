#!/usr/bin/env bash
# Install pcem-spark with its test extra and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install --quiet -e ".[test]"
exec "$PY" -m pytest -q tests "$@"
