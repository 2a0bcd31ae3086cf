"""The one check of ids that come from outside (click events, recommend requests)."""
from __future__ import annotations

import re

from service.config import ID_PATTERN

_ID = re.compile(ID_PATTERN)
MAX_SHOWN = 80


class InvalidId(ValueError):
    """An id that fails the check; `field` names where it came from."""

    def __init__(self, field: str, value, reason: str):
        super().__init__(f"{field} {shown(value)} {reason}")
        self.field, self.reason = field, reason


def shown(value) -> str:
    """The value as a message may quote it: repr (CR/LF and non-ASCII escaped), cut short.
    Never raises, whatever a JSON document from outside holds: repr of a deeply nested list
    recurses, and len() of an int fails (a 4000-digit id stopped the updater, issue 42)."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        return f"({type(value).__name__}, too large to show)"
    if len(text) <= MAX_SHOWN:
        return text
    size = f"{len(value)} chars" if isinstance(value, str) else type(value).__name__
    return f"{text[:MAX_SHOWN]}... ({size})"


def check_id(field: str, value) -> str:
    """Returns `value` when it is an id: a string matching service.config.ID_PATTERN
    (1-64 of A-Z a-z 0-9 _ . : -, starting with a letter or digit); else raises InvalidId."""
    if not isinstance(value, str):
        raise InvalidId(field, value, f"must be a string, not {type(value).__name__}")
    if not _ID.fullmatch(value):
        raise InvalidId(field, value, "is not an id: 1-64 characters of A-Z a-z 0-9 _ . : -, "
                        "starting with a letter or digit")
    return value
