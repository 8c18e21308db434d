"""Which paths a command may write: never its own input or model, never data of another kind.

Every command checks all its output paths with :func:`check_output_paths`
before it does any work (and before Spark starts where it can). The rules, the
same for every output flag (``--output``, ``--model``, ``--rejects``,
``--output-dir``):

1. An output may not be, contain, or lie inside one of the run's inputs
   (``--docs``, ``--model`` of predict, ``--init-model``, ``--taxonomy``,
   ``--descriptions``, ``--predictions``, ``--archive``, ``--input``), nor
   another output of the same run. ``--overwrite`` does not change this:
   replacing the input while reading it destroys it.
2. An existing path holding a *complete output of another kind* (its
   ``_PCEM_COMPLETE`` marker names, say, a model where predictions are to be
   written) is refused, with or without ``--overwrite``: delete it yourself if
   that is what you want.
3. Any other existing path needs ``--overwrite``. The one exception is a
   rejects table that holds the rejects *of this same input*: that is this
   command's own leftover from an earlier attempt (rejects are written before
   the main output), and a retry replaces it without ``--overwrite``.
4. A directory output is never written over a plain file, nor a file output
   over a directory.

Paths are compared after qualification: Hadoop's ``makeQualified`` (so
``/data/x`` on a cluster whose default file system is HDFS is
``hdfs://nn/data/x``) and, for local paths, symbolic links resolved. An input
given as a glob (``crawl/*.warc.gz``) protects every path it matches and the
directory it lists.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from pcem_spark.errors import OutputPathError
from pcem_spark.util.redaction import redact

__all__ = ["Output", "qualify", "check_output_paths"]

_GLOB_CHARS = "*?[{"


@dataclass(frozen=True)
class Output:
    """One output of a command.

    ``kind`` is the marker kind it will carry (``model``, ``predictions``,
    ``rejects``, ``documents``, ``inspection``) or None for a folder of plain
    files that is never replaced as a whole (the experiment's output
    directory). ``source`` (rejects only): the input whose rejects it will
    hold. ``directory``: False for a single file (JSON Lines, metrics JSON).
    """

    flag: str
    path: str
    kind: Optional[str]
    source: Optional[str] = None
    directory: bool = True


def _is_glob(path: str) -> bool:
    return any(c in path for c in _GLOB_CHARS)


def qualify(spark, path: str) -> str:
    """``path`` as one comparable string: scheme + authority + absolute path, symlinks resolved locally."""
    path = path.rstrip("/") or "/"
    if spark is not None and not _is_glob(path):
        from pcem_spark.io.file_system import file_system

        try:
            path = file_system(spark, path).qualify()
        except Exception:  # a Connect session or a scheme without a file system: compare as given
            pass
    if path.startswith("file:"):
        path = "file:" + os.path.realpath("/" + path[len("file:") :].lstrip("/"))
    elif "://" not in path:
        path = "file:" + os.path.realpath(path)
    return path.rstrip("/") or "/"


def _inside(child: str, parent: str) -> bool:
    return child.startswith(parent.rstrip("/") + "/")


def _glob_matches(spark, pattern: str):
    """The paths a glob matches now (Hadoop's globStatus with Spark, :func:`glob.glob` without)."""
    if spark is None:
        import glob

        local = pattern[len("file:") :] if pattern.startswith("file:") else pattern
        return [match for expanded in _expand_braces(local) for match in glob.glob(expanded)]
    from pcem_spark.io.hadoop_fs import HadoopFS

    try:
        statuses = HadoopFS(spark, pattern).glob()
    except Exception:  # no file system for the scheme: the pattern rules still apply
        return []
    return [str(s.getPath().toString()) for s in statuses]


def _expand_braces(pattern: str):
    """Hadoop's ``{a,b}`` alternatives as separate patterns (Python's glob has none)."""
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    depth = 0
    for end in range(start, len(pattern)):
        depth += {"{": 1, "}": -1}.get(pattern[end], 0)
        if depth == 0:
            break
    else:
        return [pattern]
    options, depth, item = [], 0, ""
    for ch in pattern[start + 1 : end]:
        if ch == "," and depth == 0:
            options.append(item)
            item = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        item += ch
    options.append(item)
    return [p for option in options for p in _expand_braces(pattern[:start] + option + pattern[end + 1 :])]


def _glob_base(pattern: str) -> str:
    """The directory a glob lists: everything before the first component with a glob character."""
    head = pattern
    for i, c in enumerate(pattern):
        if c in _GLOB_CHARS:
            head = pattern[:i]
            break
    return head.rsplit("/", 1)[0] if "/" in head else "."


def _overlap(out: str, inp: str, base: Optional[str], replaces_whole: bool) -> Optional[str]:
    """Why the qualified output ``out`` may not be written given the qualified input ``inp`` (None: fine).

    ``base`` is the directory a glob input lists (None for a plain path).
    """
    if base is not None:
        if fnmatch.fnmatchcase(out, inp):
            return "is matched by"
        if replaces_whole and (out == base or _inside(base, out)):
            return "contains the files of"
        return None
    if out == inp:
        return "is"
    if replaces_whole and _inside(inp, out):
        return "contains"
    if _inside(out, inp):
        return "lies inside"
    return None


def check_output_paths(
    spark,
    outputs: Sequence[Output],
    inputs: Sequence[Tuple[str, Optional[str]]],
    overwrite: bool,
    check_existing: bool = True,
) -> None:
    """Refuse, before any work, every output that would destroy an input, another output or other data.

    ``inputs`` are (flag, path) pairs; a None path is skipped. ``check_existing``
    False compares the paths only (rule 1), as a first look before Spark starts. Raises
    :class:`~pcem_spark.errors.OutputPathError` (rules 1, 2 and 4 of the module
    docstring) or :class:`FileExistsError` (rule 3); both exit with 2.
    """
    qualified_inputs = []
    for flag, path in inputs:  # --input lists arrive split (warc.split_inputs): one path or glob each
        if not path:
            continue
        if _is_glob(path):
            base = _glob_base(path)
            q_base = qualify(spark, base)
            rest = path[len(base) :].lstrip("/") if base != "." else path
            qualified_inputs.append((flag, path, q_base + "/" + rest, q_base))
            # What the glob matches now is input too: no output may be, contain or lie inside a match.
            qualified_inputs += [(flag, path, qualify(spark, match), None) for match in _glob_matches(spark, path)]
        else:
            qualified_inputs.append((flag, path, qualify(spark, path), None))
    seen = []
    for out in outputs:
        q_out = qualify(spark, out.path)
        replaces_whole = out.kind is not None or not out.directory
        for flag, given, q_in, base in qualified_inputs:
            why = _overlap(q_out, q_in, base, replaces_whole)
            if why:
                raise OutputPathError(
                    f"{out.flag} {out.path!r} {why} the run's input {flag} {given!r}: writing there would "
                    f"destroy what the run reads; choose another {out.flag} path (--overwrite does not "
                    "change this)"
                )
        for other_flag, other_path, q_other in seen:
            if q_out == q_other or _inside(q_out, q_other) or _inside(q_other, q_out):
                raise OutputPathError(
                    f"{out.flag} {out.path!r} and {other_flag} {other_path!r} overlap: each "
                    "output needs a path of its own"
                )
        seen.append((out.flag, out.path, q_out))
        if check_existing:  # off for a look at the paths alone, before Spark can say where they live
            _check_existing(spark, out, overwrite)


def _check_existing(spark, out: Output, overwrite: bool) -> None:
    exists, is_dir, marker = _state(spark, out)
    if not exists:
        return
    if out.directory and not is_dir:
        raise OutputPathError(
            f"{out.flag} {out.path!r} is a file; {out.flag} writes a directory. Choose "
            "another path (--overwrite does not replace a file with a directory)"
        )
    if not out.directory and is_dir:
        raise OutputPathError(
            f"{out.flag} {out.path!r} is a directory; {out.flag} writes a file. Choose "
            "another path (--overwrite does not replace a directory with a file)"
        )
    if marker is not None and out.kind is not None and marker.get("kind") != out.kind:
        raise OutputPathError(
            f"{out.flag} {out.path!r} holds a complete pcem-spark {marker.get('kind')} output, and {out.flag} "
            f"writes {out.kind}: refusing to replace it, even with --overwrite. Choose another path, or "
            "delete it yourself if it is no longer needed"
        )
    if marker is not None and out.kind is None:
        raise OutputPathError(
            f"{out.flag} {out.path!r} is a pcem-spark {marker.get('kind')} output, not a folder to write "
            "results into. Choose another path"
        )
    if (
        out.kind == "rejects"
        and out.source
        and marker is not None
        and marker.get("source") is not None
        # markers hold the source redacted (pcem_spark.util.redaction): compared as stored
        and redact(qualify(spark, str(marker["source"]))) == redact(qualify(spark, out.source))
    ):
        return  # this command's own rejects of the same input, from an earlier attempt: a retry replaces them
    if out.kind is None and out.directory:
        return  # a results folder (resumed by design): files in it are replaced one by one
    if not overwrite:
        raise FileExistsError(f"{out.flag} {out.path!r} already exists; pass --overwrite to replace it")


def _state(spark, out: Output):
    """(exists, is a directory, marker dict or None) of an output path, on any file system Spark can reach."""
    path = out.path.rstrip("/") or "/"
    if spark is None:  # local files only (checked before Spark starts)
        from pcem_spark.io.outputs import read_local_marker

        if "://" in path and not path.startswith("file:"):
            raise OutputPathError(
                f"{out.flag} {out.path!r}: this output is written with plain file I/O on the "
                "driver; give a local path (and copy it elsewhere afterwards)"
            )
        p = path[len("file:") :] if path.startswith("file:") else path
        if not os.path.lexists(p):
            return False, False, None
        return True, os.path.isdir(p), read_local_marker(p) if os.path.isdir(p) else None
    from pcem_spark.io.file_system import file_system
    from pcem_spark.io.outputs import read_marker, recover

    recover(spark, path)
    fs = file_system(spark, path)
    if not fs.exists(path):
        return False, False, None
    is_dir = fs.is_directory(path)
    return True, is_dir, read_marker(spark, path) if is_dir else None
