#!/usr/bin/env bash
# The Airflow DAG test (tests/dags) in its own venv, .venv-airflow: Airflow is
# heavy (~1.4 GB installed) and pins much of its own stack, so it stays out of the
# main environment. Creates the venv on first use, installs -e ".[airflow,test]",
# and runs the tests; fails if any of them was skipped (PCEM_REQUIRE_AIRFLOW=1).
#
# Usage: bash scripts/test_airflow.sh [pytest args]
#        bash scripts/test_airflow.sh --prepare   only make the venv and install what the project
#          needs (read from the metadata of the pcem-spark installed for $PYTHON), not the project:
#          no build in the source tree, so .ci/run runs it in the background beside the other steps
#   PYTHON=python3.11   interpreter the venv is made from (default python3)
#   AIRFLOW_VENV=dir    venv location (default .venv-airflow)
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac  # the header above, no work
cd "$(dirname "$0")/.."
prepare_only=0
if [ "${1:-}" = "--prepare" ]; then prepare_only=1; shift; fi
PY=${PYTHON:-python3}
VENV=${AIRFLOW_VENV:-.venv-airflow}
start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
if [ "$prepare_only" = 1 ]; then
  # The requirements of the project and of its airflow and test extras, as the installed metadata
  # states them (the editable install of the project itself would write its egg-info in the source
  # tree, which the other steps' installs and builds write too).
  mapfile -t reqs < <("$PY" - <<'EOF'
import importlib.metadata as md
from packaging.requirements import Requirement
for line in md.requires("pcem-spark") or []:
    req = Requirement(line)
    if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("airflow", "test")):
        req.marker = None
        print(req)
EOF
  )
  "$VPY" -m pip install --quiet --disable-pip-version-check "${reqs[@]}"
else
  "$VPY" -m pip install --quiet --disable-pip-version-check -e ".[airflow,test]"
fi
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
if [ "$prepare_only" = 1 ]; then
  echo "airflow venv prepared in $(( $(date +%s) - start ))s (the project is installed by the run)"
  exit 0
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
