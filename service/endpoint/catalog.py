"""The item catalog joined into answers: catalog.path, a CSV whose first column is the item id.

Published fields are an allowlist: only the columns of catalog.public_fields are kept while the
file is read, every other column (a new one added to the file included) is dropped there, never
held by the endpoint, so no answer path can leak it. catalog.sensitive_fields (e.g. price,
unit_cost) is the explicit refusal list: a column in both lists fails the start (the config
check, and here again). Every name in either list must be a column of the file: a misspelt name
fails the start (CatalogError naming it and the config key).
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Dict, Iterable, Optional

RESERVED = ("item_id", "score")


class CatalogError(ValueError):
    """A catalog the endpoint does not start with; the message names the file and the field."""


class Catalog:
    def __init__(self, rows: Dict[str, Dict[str, Optional[str]]], columns: tuple):
        self.rows, self.columns = rows, columns

    def __len__(self) -> int:
        return len(self.rows)

    def item(self, item_id: str, score: Optional[float]) -> dict:
        """An answer's item: item_id, score and the public columns (an item missing from the
        catalog: item_id and score only)."""
        return {"item_id": item_id, "score": score, **self.rows.get(item_id, {})}


def load_catalog(path: Path, *, public_fields: Iterable[str],
                 sensitive_fields: Iterable[str]) -> Catalog:
    """The catalog with the item id and the public_fields' columns only (CatalogError naming
    the file and the config key for a field in both lists or not a column)."""
    path = Path(path)
    public, sensitive = list(public_fields), list(sensitive_fields)
    both = [name for name in public if name in sensitive]
    if both:
        raise CatalogError(f"catalog {path}: catalog.public_fields names {both}, which "
                           "catalog.sensitive_fields refuses to publish")
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if not header:
                raise CatalogError(f"catalog {path} is empty: a header row is expected")
            for key, names in (("public_fields", public), ("sensitive_fields", sensitive)):
                missing = [name for name in names if name not in header[1:]]
                if header[0] in names:
                    raise CatalogError(f"catalog {path}: its first column {header[0]!r} is the "
                                       f"item id (always published as item_id); catalog.{key} "
                                       "cannot name it")
                if missing:
                    raise CatalogError(
                        f"catalog {path}: catalog.{key} {missing} are not columns of it "
                        f"(columns: {header}); a misspelt name is refused, not skipped")
            keep = [i for i, name in enumerate(header) if i > 0 and name in public]
            clash = [header[i] for i in keep if header[i] in RESERVED]
            if clash:
                raise CatalogError(f"catalog {path}: columns {clash} clash with the answer's "
                                   f"{list(RESERVED)}")
            rows: Dict[str, Dict[str, Optional[str]]] = {}
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(header):
                    raise CatalogError(f"catalog {path} line {line}: {len(row)} cells, the "
                                       f"header has {len(header)}")
                if row[0] in rows:
                    raise CatalogError(f"catalog {path} line {line}: item {row[0]!r} again")
                rows[row[0]] = {header[i]: (row[i] or None) for i in keep}
    except OSError as e:
        raise CatalogError(f"catalog {path}: {e}") from None
    return Catalog(rows, tuple(header[i] for i in keep))
