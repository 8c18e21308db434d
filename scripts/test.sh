#!/usr/bin/env bash
# Install pcem-spark with its test extra and run a tier of the test suite.
#
#   bash scripts/test.sh          the fast tier: unit and small-Spark tests (the README's test command)
#   bash scripts/test.sh --slow   the slow tier: standalone cluster, Spark Connect, full 20 Newsgroups runs,
#                                 kill-at-every-stage, benchmark scripts (tests marked "slow")
#   bash scripts/test.sh --all    both tiers
#
# Further arguments go to pytest (e.g. -x, -k name). The Airflow DAG tests (tests/dags, also slow)
# need Airflow in its own venv: scripts/test_airflow.sh. .ci/run runs all three.
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac  # the header above, no work
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
tier=(-m "not slow")
name=fast
case "${1:-}" in
  --slow) tier=(-m slow); name=slow; shift ;;
  --all) tier=(); name=all; shift ;;
esac
# PCEM_NO_INSTALL=1: the caller installed it (.ci/run, which runs other steps beside a tier: a reinstall
# would take the package away from them for a moment).
[ "${PCEM_NO_INSTALL:-0}" = 1 ] || "$PY" -m pip install --quiet -e ".[test]"
# Two pytest workers (pytest-xdist), each with its own SparkSession, each taking a whole test file
# at a time so that module fixtures (a standalone cluster, a Connect server) stay in one process, the
# longest files first (tests/conftest.py, LONGEST_FIRST).
# A test's JVMs keep a 2-core machine about 65% busy (tests/conftest.py): a second worker fills
# the rest. PCEM_TEST_WORKERS=0 runs everything in this process, in file order.
workers=${PCEM_TEST_WORKERS:-2}
# --durations: the slowest tests are listed at the end, so a tier that grows shows where (CI keeps the log);
# the JUnit XML (build/test-results/TIER.xml) has every test's seconds and the JVMs it started, which
# scripts/test_times.py sums per file (.ci/run prints it).
mkdir -p build/test-results
exec "$PY" -m pytest -q --durations=15 -n "$workers" --dist loadfile --no-loadscope-reorder \
  --junitxml="build/test-results/$name.xml" tests --ignore=tests/dags "${tier[@]}" "$@"
