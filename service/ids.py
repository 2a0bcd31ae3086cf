"""The one check of ids that come from outside (click events, recommend requests)."""
from __future__ import annotations

import re

from core.service_config import ID_PATTERN

_ID = re.compile(ID_PATTERN)
MAX_SHOWN = 80


class InvalidId(ValueError):
    """An id that fails the check; `field` names where it came from."""

    def __init__(self, field: str, value, reason: str):
        super().__init__(f"{field} {shown(value)} {reason}")
        self.field, self.reason = field, reason


def shown(value) -> str:
    """The value as a message may quote it: repr (CR/LF and non-ASCII escaped), cut short."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN]}... ({len(value)} chars)"


def check_id(field: str, value) -> str:
    """Returns `value` when it is an id: a string matching core.service_config.ID_PATTERN
    (1-64 of A-Z a-z 0-9 _ . : -, starting with a letter or digit); else raises InvalidId."""
    if not isinstance(value, str):
        raise InvalidId(field, value, f"must be a string, not {type(value).__name__}")
    if not _ID.fullmatch(value):
        raise InvalidId(field, value, "is not an id: 1-64 characters of A-Z a-z 0-9 _ . : -, "
                        "starting with a letter or digit")
    return value
