"""Label descriptions of the dataless setting: read from JSON and checked against the taxonomy
(every key a node, every value text), with errors that name the node."""

from __future__ import annotations

import json
import logging
from typing import Dict

from pcem_spark.core.similarity import _MAX_NAMES, _more
from pcem_spark.core.taxonomy import Taxonomy, TaxonomyError, closest_name
from pcem_spark.util.strict_json import StrictJSONError, load_strict

__all__ = ["load_descriptions", "check_descriptions"]

log = logging.getLogger(__name__)


def load_descriptions(path: str, taxonomy: Taxonomy, every_leaf: bool = True) -> Dict[str, str]:
    """Read a JSON object node -> description and check it against the taxonomy (:func:`check_descriptions`;
    ``every_leaf`` False: leaves may lack one, as when the descriptions add to the category names)."""
    try:
        with open(path, "r", encoding="utf-8") as fh:
            obj = load_strict(fh, path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TaxonomyError(f"{path}: cannot read label descriptions ({exc})") from None
    except StrictJSONError as exc:  # a node described twice: the first text would silently vanish
        raise TaxonomyError(str(exc)) from None
    return check_descriptions(obj, taxonomy, where=path, every_leaf=every_leaf)


def check_descriptions(obj, taxonomy: Taxonomy, where: str = "descriptions", every_leaf: bool = True) -> Dict[str, str]:
    """Validate a parsed node -> description mapping against the taxonomy.

    Returns a dict node -> description text for the described nodes of the
    taxonomy (``where`` names the file or Param in every message):

    * a node that is not in the taxonomy (e.g. a class the training data
      lacks when the taxonomy is inferred): logged warning, ignored;
    * an inner node with no description: logged warning; its vector is then
      its descendants' descriptions only (:func:`description_matrix` always
      adds those, so the node still has words -- unlike in the paper, where
      every node has its own description);
    * a leaf with no description: :class:`TaxonomyError` naming the leaves.
      Such a leaf could never get a weak label, and the fix is one line of
      the file, so failing before training is the cheaper outcome. With
      ``every_leaf`` False (descriptions that add to the category names of a
      labelled training, ``model.names``) it is fine: its name still counts.
    """
    if not isinstance(obj, dict):
        raise TaxonomyError(f"{where}: expected a JSON object node -> description text")
    known = set(taxonomy.real_nodes)
    if taxonomy.root in obj:
        # The root is not a class (no similarity column): nothing to warn about.
        log.info("%s: the description of the root %r is not used (the root is not a class)", where, taxonomy.root)
    unknown = sorted(set(obj) - known - {taxonomy.root})
    if unknown:
        hints = [
            f"{n!r}" + (f" (did you mean {g!r}?)" if (g := closest_name(n, sorted(known))) else "")
            for n in unknown[:_MAX_NAMES]
        ]
        log.warning(
            "%s: %d description(s) for node(s) that are not in the taxonomy are ignored: %s%s. "
            "Correct the node name in %s if it is a typo. A taxonomy inferred from the labels lacks "
            "the classes no document is labelled with: pass --taxonomy FILE to keep them.",
            where,
            len(unknown),
            ", ".join(hints),
            _more(unknown),
            where,
        )
    missing = sorted((n for n in known if not _text(obj.get(n))), key=lambda n: (taxonomy.node_depth(n), n))
    leaves = set(taxonomy.leaves)
    missing_leaves = [n for n in missing if n in leaves]
    if missing_leaves and every_leaf:
        raise TaxonomyError(
            f"{where}: no description for leaf node(s) {missing_leaves[:_MAX_NAMES]}{_more(missing_leaves)} "
            f"({len(missing_leaves)} of {len(leaves)} leaves): a leaf without a description can never get a "
            f'weak label. Add a line "{missing_leaves[0]}": "a few words typical of its documents" for each '
            f"to {where}, or remove those leaves from the taxonomy"
        )
    missing_inner = [n for n in missing if n not in leaves]
    if missing_inner and every_leaf:
        log.warning(
            "%s: no description for inner node(s) %s%s: each is described by its descendants' "
            "descriptions only. Add own descriptions to %s to follow the paper's setup.",
            where,
            missing_inner[:_MAX_NAMES],
            _more(missing_inner),
            where,
        )
    return {n: _text(v) for n, v in obj.items() if n in known and _text(v)}


def _text(value) -> str:
    """A description as stripped text ("" for null/blank)."""
    return str(value).strip() if value is not None else ""
