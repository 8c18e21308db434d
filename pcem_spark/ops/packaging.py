"""Artifacts a cluster needs, built the way Spark's "Python Package Management" guide says.

* ``pcem_spark.zip`` -- this package, for ``spark-submit --py-files``: small,
  rebuilt whenever the code changes.
* ``pcem_env.tar.gz`` -- a relocatable virtualenv (venv-pack) holding the
  executors' third-party dependencies (numpy, scipy, pyarrow, pandas) pinned to
  the versions the driver runs, for ``--archives pcem_env.tar.gz#environment``
  with ``spark.pyspark.python=./environment/bin/python``. Pinning to the
  driver's versions keeps executor and driver arithmetic identical (the same
  BLAS build), so a cluster run equals a local one.

venv-pack does not pack the interpreter itself: ``environment/bin/python``
links to the base interpreter the venv was made from, so the executors need
that same Python (same minor version, same absolute path) -- true of a fleet
built from one image. Use conda-pack instead when they do not have it.

Command line (what ``scripts/package.sh`` runs)::

    python -m pcem_spark.ops.packaging --out dist [--no-env] [--python python3.11]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from typing import Dict, List, Optional, Sequence

from pcem_spark.util.filemodes import file_mode
from pcem_spark.util.strict_json import load_strict

__all__ = [
    "EXECUTOR_REQUIREMENTS",
    "OPTIONAL_EXECUTOR_REQUIREMENTS",
    "PY_FILES_NAME",
    "ENV_ARCHIVE_NAME",
    "ENV_MANIFEST_NAME",
    "package_dir",
    "driver_pins",
    "build_py_files",
    "optional_pins",
    "build_env_archive",
    "sha256",
    "main",
]

# What the executors import: the numeric stack (pathnb, engine) and what
# PySpark's Arrow UDFs (mapInArrow, pandas UDFs) need. pyspark itself comes
# from the cluster's Spark (SPARK_HOME/python/lib/pyspark.zip), never the env.
EXECUTOR_REQUIREMENTS = ("numpy", "scipy", "pyarrow", "pandas")
# Imported on the executors only by some commands (pcem ingest-warc: the "warc" extra); packed,
# pinned to the driver's versions, when the driver has them installed (scripts/package.sh installs them).
OPTIONAL_EXECUTOR_REQUIREMENTS = ("fastwarc", "resiliparse", "warcio")

PY_FILES_NAME = "pcem_spark.zip"
ENV_ARCHIVE_NAME = "pcem_env.tar.gz"
ENV_MANIFEST_NAME = "pcem_env.json"


def package_dir() -> str:
    """The ``pcem_spark`` package directory (this module lives in its ``ops`` subpackage)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def driver_pins(names: Sequence[str] = EXECUTOR_REQUIREMENTS) -> List[str]:
    """``name==version`` for each executor requirement, as installed here."""
    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            raise SystemExit(  # noqa: B904 (the message says all there is)
                f"{name} is not installed in {sys.executable}: install pcem-spark "
                f"(pip install .) before packaging, so the env matches the driver"
            )
    return pins


def build_py_files(out_dir: str) -> str:
    """Zip ``pcem_spark/`` (sources only) to ``out_dir/pcem_spark.zip``; return the path.

    Written to a temporary name and renamed, so a killed build never leaves a
    truncated zip that a later spark-submit would ship.
    """
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, PY_FILES_NAME)
    src = package_dir()
    fd, tmp = tempfile.mkstemp(prefix=".pcem_spark.", suffix=".zip", dir=out_dir)
    os.close(fd)
    try:
        os.chmod(tmp, file_mode())  # mkstemp's 0o600 -> what open() gives: readable by whoever ships it
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for root, dirs, files in os.walk(src):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if not name.endswith((".py", ".json", ".txt", ".toml")):  # .toml: the shipped default settings
                        continue
                    path = os.path.join(root, name)
                    arcname = os.path.join("pcem_spark", os.path.relpath(path, src))
                    # Fixed timestamps: the same sources give the same zip.
                    info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = 0o644 << 16
                    with open(path, "rb") as fh:
                        zf.writestr(info, fh.read())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def optional_pins(names: Sequence[str] = OPTIONAL_EXECUTOR_REQUIREMENTS) -> List[str]:
    """``name==version`` for each optional executor requirement installed here (the others are skipped)."""
    return driver_pins([n for n in names if _installed(n)])


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def _manifest(python: str, pins: Sequence[str]) -> Dict[str, object]:
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    base = subprocess.run(
        [python, "-c", "import sys, os; print(os.path.realpath(sys.executable))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {"python_version": version, "base_interpreter": base, "requirements": list(pins)}


def build_env_archive(
    out_dir: str, python: Optional[str] = None, pins: Optional[Sequence[str]] = None, force: bool = False
) -> str:
    """venv-pack a fresh virtualenv with the executor requirements; return the archive path.

    Skipped when ``out_dir`` already holds an archive whose manifest
    (``pcem_env.json``: interpreter, version, pins) matches, unless ``force``.
    """
    python = python or sys.executable
    pins = list(pins or driver_pins() + optional_pins())
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, ENV_ARCHIVE_NAME)
    manifest_path = os.path.join(out_dir, ENV_MANIFEST_NAME)
    wanted = _manifest(python, pins)
    if not force and os.path.exists(target) and os.path.exists(manifest_path):
        try:
            with open(manifest_path, encoding="utf-8") as fh:
                built = load_strict(fh, manifest_path)
        except ValueError as exc:  # damaged (a repeated key, bad JSON, not UTF-8): it cannot vouch for the archive
            print(f"{manifest_path} is damaged, rebuilding the archive: {exc}", file=sys.stderr)
            built = None
        if built == wanted:
            print(f"{target} is up to date ({', '.join(pins)})", file=sys.stderr)
            return target
    venv_pack = shutil.which("venv-pack") or os.path.join(os.path.dirname(sys.executable), "venv-pack")
    if not os.path.exists(venv_pack):
        raise SystemExit("venv-pack not found: pip install venv-pack (the cluster extra)")
    work = tempfile.mkdtemp(prefix="pcem-env-", dir=out_dir)
    try:
        env = os.path.join(work, "env")
        # No pip/setuptools in the env (24 MB the executors never use): this
        # interpreter's pip installs into it with --python.
        subprocess.run([python, "-m", "venv", "--without-pip", env], check=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                os.path.join(env, "bin", "python"),
                "install",
                "--quiet",
                "--disable-pip-version-check",
                *pins,
            ],
            check=True,
        )
        tmp = os.path.join(work, ENV_ARCHIVE_NAME)
        subprocess.run([venv_pack, "--quiet", "-p", env, "-o", tmp], check=True)
        os.chmod(tmp, file_mode())  # built inside mkdtemp's private folder: the umask decides, as for open()
        os.replace(tmp, target)
        fd, tmp_manifest = tempfile.mkstemp(dir=out_dir, prefix=".pcem_env.", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), file_mode())
            json.dump(wanted, fh, indent=2)
        os.replace(tmp_manifest, manifest_path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pcem_spark.ops.packaging",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default="dist", help="output folder (default: dist)")
    parser.add_argument("--python", default=None, help="base interpreter of the executors' env (default: this one)")
    parser.add_argument("--no-env", action="store_true", help="only build the --py-files zip")
    parser.add_argument("--force", action="store_true", help="rebuild the env archive even if up to date")
    args = parser.parse_args(argv)
    zip_path = build_py_files(args.out)
    print(f"--py-files  {zip_path}  ({os.path.getsize(zip_path) / 1e3:.0f} kB)")
    if not args.no_env:
        env_path = build_env_archive(args.out, python=args.python, force=args.force)
        print(f"--archives  {env_path}#environment  ({os.path.getsize(env_path) / 1e6:.0f} MB)")
        print("--conf spark.pyspark.python=./environment/bin/python")
    return 0


if __name__ == "__main__":
    sys.exit(main())
