#!/usr/bin/env bash
# The Airflow DAG test (tests/dags) in its own venv, .venv-airflow: Airflow is
# heavy (~1.4 GB installed) and pins much of its own stack, so it stays out of the
# main environment. Creates the venv on first use, installs -e ".[airflow,test]",
# and runs the tests; fails if any of them was skipped (PCEM_REQUIRE_AIRFLOW=1).
#
# Usage: bash scripts/test_airflow.sh [pytest args]
#   PYTHON=python3.11   interpreter the venv is made from (default python3)
#   AIRFLOW_VENV=dir    venv location (default .venv-airflow)
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac  # the header above, no work
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${AIRFLOW_VENV:-.venv-airflow}
start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
"$VPY" -m pip install --quiet --disable-pip-version-check -e ".[airflow,test]"
# The Spark provider depends on pyspark-client (Spark Connect's pure-Python client), which
# installs the same pyspark/ package files as pyspark at its own, possibly older, version:
# whichever is installed last wins, and a mix of pyspark-client's .py files with pyspark's
# jars breaks spark-submit. Put pyspark's own files back at the version pip resolved.
want=$("$VPY" -c 'import importlib.metadata as m; print(m.version("pyspark"))')
have=$("$VPY" -c 'import pyspark; print(pyspark.__version__)')
if [ "$want" != "$have" ]; then
  echo "pyspark files are pyspark-client's ($have), reinstalling pyspark $want over them"
  "$VPY" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "pyspark==$want"
  have=$("$VPY" -c 'import pyspark; print(pyspark.__version__)')
  [ "$want" = "$have" ] || { echo "pyspark still reports $have, expected $want" >&2; exit 1; }
fi
"$VPY" -m pip check
echo "airflow venv ready in $(( $(date +%s) - start ))s: $("$VPY" -m pip list --format=freeze 2>/dev/null \
  | grep -iE '^(apache-airflow|apache-airflow-core|apache-airflow-providers-apache-spark|pyspark|pyspark-client)==' \
  | tr '\n' ' ')"
# spark-submit of this venv first on PATH (the DAG's SparkSubmitOperator runs "spark-submit").
export PATH="$PWD/$VENV/bin:$PATH"
export PCEM_REQUIRE_AIRFLOW=1
t0=$(date +%s)
set +e
"$VPY" -m pytest -q -p no:cacheprovider tests/dags "$@"
rc=$?
set -e
echo "airflow DAG tests: exit $rc in $(( $(date +%s) - t0 ))s (total $(( $(date +%s) - start ))s)"
exit $rc
