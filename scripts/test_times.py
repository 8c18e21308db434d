"""Where the test suite's time goes: seconds per file and per test, by tier, with the JVMs each file started.

Reads the JUnit XML that pytest writes (``--junitxml``; ``scripts/test.sh`` writes
``build/test-results/fast.xml`` and ``slow.xml``) and prints, for each file given,

* one row per test file: tests, seconds (setup, call and teardown summed over the
  tests, so a module fixture's cost counts once, on the test that started it),
  the JVMs its tests started (``jvms``: the test session's Spark driver, ``pcem``
  and ``spark-submit`` processes, a standalone cluster's daemons, a Spark
  Connect server; recorded by ``tests/conftest.py`` as each test's ``jvms``
  property) and its share of the tier;
* the ``--top`` slowest tests.

Seconds are summed over pytest-xdist workers: a tier's wall time is about
this sum over the number of workers (two in ``scripts/test.sh``), plus the
start of each worker. Usage::

    python scripts/test_times.py build/test-results/fast.xml build/test-results/slow.xml
    python scripts/test_times.py --markdown --top 0 before.xml   # a table for the docs
"""

from __future__ import annotations

import argparse
import os
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Dict, List, Tuple


def read_results(path: str) -> Tuple[List[dict], float]:
    """The test cases of one JUnit XML file (file, name, seconds, jvms, outcome) and the run's wall seconds."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    cases, wall = [], 0.0
    for suite in suites:
        wall += float(suite.get("time") or 0.0)
        for case in suite.iter("testcase"):
            module = (case.get("classname") or "").split(".")
            # "tests.test_cluster" -> test_cluster.py, "tests.dags.test_pcem_dag" -> dags/test_pcem_dag.py
            name = "/".join(module[1:]) if len(module) > 1 and module[0] == "tests" else ".".join(module)
            properties = {p.get("name"): p.get("value") for p in case.iter("property")}
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                if case.find(tag) is not None:
                    outcome = tag
            cases.append(
                {
                    "file": f"{name}.py" if name else "?",
                    "test": case.get("name", "?"),
                    "seconds": float(case.get("time") or 0.0),
                    "jvms": int(properties.get("jvms") or 0),
                    "outcome": outcome,
                }
            )
    return cases, wall


def per_file(cases: List[dict]) -> List[dict]:
    """One row per file, the slowest first."""
    files: Dict[str, dict] = defaultdict(lambda: {"tests": 0, "seconds": 0.0, "jvms": 0})
    for case in cases:
        row = files[case["file"]]
        row["tests"] += 1
        row["seconds"] += case["seconds"]
        row["jvms"] += case["jvms"]
    rows = [{"file": name, **row} for name, row in files.items()]
    return sorted(rows, key=lambda r: (-r["seconds"], r["file"]))


def table(cases: List[dict], wall: float, title: str, top: int, markdown: bool, limit: int) -> str:
    files = per_file(cases)
    total = sum(r["seconds"] for r in files) or 1.0
    jvms = sum(r["jvms"] for r in files)
    outcomes = defaultdict(int)
    for case in cases:
        outcomes[case["outcome"]] += 1
    head = (
        f"{title}: {len(cases)} tests ({', '.join(f'{n} {k}' for k, n in sorted(outcomes.items()))}), "
        f"{total:.0f} s summed over the workers, {wall:.0f} s wall, {jvms} JVMs started"
    )
    lines = [head, ""]
    shown = files if limit <= 0 else files[:limit]
    if markdown:
        lines += ["| file | tests | seconds | JVMs | share |", "|---|---|---|---|---|"]
        lines += [
            f"| {r['file']} | {r['tests']} | {r['seconds']:.1f} | {r['jvms']} | {100 * r['seconds'] / total:.1f}% |"
            for r in shown
        ]
    else:
        lines.append(f"{'seconds':>9} {'share':>6} {'tests':>5} {'JVMs':>4}  file")
        lines += [
            f"{r['seconds']:9.1f} {100 * r['seconds'] / total:5.1f}% {r['tests']:5d} {r['jvms']:4d}  {r['file']}"
            for r in shown
        ]
    if len(shown) < len(files):
        rest = files[len(shown) :]
        lines.append(f"  ... {len(rest)} more files, {sum(r['seconds'] for r in rest):.1f} s")
    if top > 0:
        lines += ["", f"the {min(top, len(cases))} slowest tests:"]
        for case in sorted(cases, key=lambda c: -c["seconds"])[:top]:
            jvm = f" ({case['jvms']} JVMs)" if case["jvms"] else ""
            lines.append(f"{case['seconds']:9.1f}  {case['file']}::{case['test']}{jvm}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+", help="JUnit XML files (one per tier)")
    ap.add_argument("--top", type=int, default=15, help="the slowest tests listed per tier (0: none)")
    ap.add_argument("--files", type=int, default=0, help="files listed per tier (0: all)")
    ap.add_argument("--markdown", action="store_true", help="Markdown tables (for the docs)")
    args = ap.parse_args(argv)
    for path in args.results:
        if not os.path.exists(path):
            print(f"{path}: no such file (did that tier run?)", file=sys.stderr)
            return 2
        cases, wall = read_results(path)
        title = os.path.splitext(os.path.basename(path))[0]
        print(table(cases, wall, title, args.top, args.markdown, args.files))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
