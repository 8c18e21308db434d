#!/usr/bin/env bash
# Build the user guide and the API reference (Sphinx, numpydoc, MyST) into build/docs/html,
# with every warning an error: a docstring docutils cannot parse, a public name that does not
# import, and a broken internal link (a Markdown link to a missing page, file or #anchor) all
# fail the build. External links are not fetched (CI has no general internet).
#
# Usage: bash scripts/build_docs.sh [sphinx-build args]
#   PYTHON=python3.11   interpreter (default python3); installs -e ".[docs]" into it
#   PCEM_NO_INSTALL=1   the caller installed it (.ci/run)
#   Open build/docs/html/docs/index.html.
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac  # the header above, no work
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ "${PCEM_NO_INSTALL:-0}" = 1 ] || "$PY" -m pip install --quiet --disable-pip-version-check -e ".[docs]"
start=$(date +%s)
# -E: read every source again (an incremental build would not re-check unchanged pages' links);
# -c docs: the configuration is docs/conf.py, the source folder the repository root.
"$PY" -m sphinx -b html -c docs -W --keep-going -E -q . build/docs/html "$@"
pages=$(find build/docs/html -name '*.html' | wc -l)
echo "docs built in $(( $(date +%s) - start ))s: $pages pages, no warnings; open build/docs/html/docs/index.html"
