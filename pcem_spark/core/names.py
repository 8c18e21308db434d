"""Category names as words: what a taxonomy's node names say about their documents.

The leaf names of real taxonomies are words run together: ``book_flight``,
``SoccerPlayer``, ``comp.sys.ibm.pc.hardware``, ``HTTPServer2``.
:func:`name_words` splits them the way a reader would -- at punctuation and
white space, at a lower-to-upper case change, before the last capital of a
run of capitals followed by lower case, and between letters and digits -- and
lower-cases them. :func:`path_name_text` joins the words of every node on a
path (its ancestors' names are evidence for it too) with the node's
description, when one is given: the text of the path's *name document*,
which the featuriser then counts like any document's text.
"""

from __future__ import annotations

import re
from typing import Dict, List, Mapping, Optional, Sequence

__all__ = ["name_words", "path_name_text", "name_texts"]

# A word: a run of capitals not followed by lower case (an acronym), a capitalised or lower-case word, or a number.
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+|[^\W\d_]+", re.UNICODE)


def name_words(name: str) -> List[str]:
    """The words of a node name, lower-cased.

    >>> name_words("book_flight"), name_words("SoccerPlayer"), name_words("comp.sys.ibm.pc.hardware")
    (['book', 'flight'], ['soccer', 'player'], ['comp', 'sys', 'ibm', 'pc', 'hardware'])
    >>> name_words("HTTPServer2"), name_words("talk.politics.mideast"), name_words("Café au lait")
    (['http', 'server', '2'], ['talk', 'politics', 'mideast'], ['café', 'au', 'lait'])
    """
    words = []
    for chunk in re.split(r"[\W_]+", name, flags=re.UNICODE):
        if not chunk:
            continue
        if chunk.isascii():
            words += _WORD.findall(chunk)
        else:  # non-ASCII scripts: split between letters and digits only (no case rule to apply)
            words += re.findall(r"[0-9]+|[^\W\d_]+", chunk, flags=re.UNICODE)
    return [w.lower() for w in words if w]


def path_name_text(path: Sequence[str], descriptions: Optional[Mapping[str, str]] = None) -> str:
    """The text of a path's name document: the words of each node's name, then its description if any."""
    parts = []
    for node in path:
        parts.append(" ".join(name_words(node)))
        if descriptions and descriptions.get(node):
            parts.append(str(descriptions[node]))
    return " ".join(p for p in parts if p)


def name_texts(paths: Sequence[Sequence[str]], descriptions: Optional[Mapping[str, str]] = None) -> Dict[int, str]:
    """``{path index: name document text}`` of every path (real nodes only, as :meth:`Taxonomy.real_path` gives)."""
    return {j: path_name_text(path, descriptions) for j, path in enumerate(paths)}
