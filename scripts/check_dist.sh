#!/usr/bin/env bash
# Build the distributions, check them, and install the wheel into a clean venv as a new user
# would: `python -m build` (sdist + wheel into build/dist), `twine check`, then a fresh venv
# with only the wheel (and what it depends on) runs `pcem --version` and the README's quick start
# verbatim, from an empty folder outside the checkout (each command's first settings line names the
# package defaults; the metrics and the inspect report are checked), and prints each command's time.
# This is the quick start's end-to-end check: the test suite checks only its sample lines.
#
# Usage: bash scripts/check_dist.sh [--build-only | --from-wheel]
#   --build-only           only build and check the distributions (they write into the checkout:
#                          build/dist and the egg-info)
#   --from-wheel           only the clean venv and the quick start, from build/dist's wheel (reads
#                          nothing else of the checkout but README.md, so it can run beside the tests)
#   PYTHON=python3.11      interpreter (default python3)
#   DIST_VENV=dir          the clean venv (default: a new temporary folder, removed at the end)
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac  # the header above, no work
mode=${1:-all}
case "$mode" in all | --build-only | --from-wheel) ;; *) echo "unknown option: $mode (see --help)" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python3}
start=$(date +%s)
if [ "$mode" != --from-wheel ]; then
  "$PY" -m pip install --quiet --disable-pip-version-check "build>=1.2" "twine>=6" 2>&1 | { grep -v "^WARNING: Location" || true; }
  rm -rf build/dist && mkdir -p build
  "$PY" -m build --outdir build/dist . >build/build.log 2>&1 || { tail -40 build/build.log >&2; exit 1; }
  "$PY" -m twine check --strict build/dist/*
  echo "built $(ls build/dist | tr '\n' ' ')in $(( $(date +%s) - start ))s"
  [ "$mode" = --build-only ] && exit 0
fi
wheel=$(ls build/dist/*.whl) || { echo "no wheel in build/dist: run scripts/check_dist.sh --build-only first" >&2; exit 1; }
version=$("$PY" -c 'import re; print(re.search(r"__version__ = \"([^\"]+)\"", open("pcem_spark/__init__.py").read()).group(1))')

work=$(mktemp -d)
VENV=${DIST_VENV:-$work/venv}
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel" 2>&1 | { grep -v "^WARNING: Location" || true; }
echo "clean venv with the wheel installed in $(( $(date +%s) - t0 ))s"
# Nothing of the checkout is importable from here: the venv's own package runs.
mkdir "$work/empty"
cd "$work/empty"
export PATH="$VENV/bin:$PATH"
unset PYTHONPATH PCEM_CONFIG SPARK_REMOTE PYSPARK_SUBMIT_ARGS || true
got=$(pcem --version)
[ "$got" = "pcem-spark $version" ] || { echo "pcem --version printed '$got', expected 'pcem-spark $version'" >&2; exit 1; }
where=$(python -c 'import pcem_spark, os; print(os.path.dirname(pcem_spark.__file__))')
case "$where" in "$REPO"*) echo "the venv imports the checkout ($where), not the wheel" >&2; exit 1 ;; esac
echo "$got (from $where)"
# The README's quick start, line by line as a user pastes it.
python - "$REPO/README.md" >"$work/quickstart.sh" <<'PYEOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
start = text.index("## Your own data in two minutes")
end = text.find("\n## ", start + 1)
(block,) = re.findall(r"```bash\n(.*?)```", text[start:end], re.S)
print(block.strip())
PYEOF
total=0
while IFS= read -r line; do
  t=$(date +%s)
  bash -c "$line" >"$work/step.log" 2>&1 || { echo "FAILED: $line" >&2; tail -30 "$work/step.log" >&2; exit 1; }
  # Outside any checkout the package's own defaults apply, and the first log line says so.
  grep -m1 "settings: " "$work/step.log" | grep -q "settings: package defaults;" \
    || { echo "FAILED: $line did not log 'settings: package defaults;' first" >&2; head -5 "$work/step.log" >&2; exit 1; }
  echo "  $(( $(date +%s) - t ))s  $line"
  total=$(( total + $(date +%s) - t ))
done <"$work/quickstart.sh"
python - <<'PYEOF'
import json, os, sys
m = json.load(open("out/quick/metrics.json"))
print("quick start: %d test documents, micro F1 %.4f, macro F1 %.4f" % (m["n_documents"], m["micro_f1"], m["macro_f1"]))
missing = [n for n in ("model.md", "taxonomy.html", "confusion.md") if not os.path.exists(os.path.join("out/quick/report", n))]
if m["n_documents"] != 30 or m["micro_f1"] <= 0.8 or missing:
    sys.exit(f"quick start: expected 30 documents, micro F1 > 0.8 and the report's pages; missing {missing}")
PYEOF
echo "quick start from the wheel in ${total}s; whole check $(( $(date +%s) - start ))s"
