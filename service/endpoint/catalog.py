"""The item catalog joined into answers: catalog.path, a CSV whose first column is the item id.

The columns of catalog.sensitive_fields (e.g. price, unit_cost) are dropped while the file is
read: they are never held by the endpoint, so no answer path can leak them. Each one must be a
column of the file: a misspelt name would otherwise leave the real column in every answer, so it
fails the start (CatalogError naming it).
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


def load_catalog(path: Path, sensitive_fields: Iterable[str]) -> Catalog:
    path = Path(path)
    sensitive = list(sensitive_fields)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if not header:
                raise CatalogError(f"catalog {path} is empty: a header row is expected")
            missing = [name for name in sensitive if name not in header]
            if missing:
                raise CatalogError(
                    f"catalog {path}: catalog.sensitive_fields {missing} are not columns of it "
                    f"(columns: {header}); a misspelt name would leak the real column")
            if header[0] in sensitive:
                raise CatalogError(f"catalog {path}: its first column {header[0]!r} is the "
                                   "item id and cannot be a sensitive field")
            keep = [i for i, name in enumerate(header) if i > 0 and name not in sensitive]
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
