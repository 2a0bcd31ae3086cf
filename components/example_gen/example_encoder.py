"""Typed CSV rows -> serialized tf.Examples, without TensorFlow: the encoder behind
components/example_gen/csv_reader.py.

The bytes are those of tf.train.Example.SerializeToString(deterministic=True), written from
precomputed pieces (a map entry's head per column, a text field per repeated cell) instead of a
proto per row; tests/components/test_csv_example_gen.py parses them back with TensorFlow. The
number policy is core/csv_cells.py's; DataError names the file, line, column and value.
"""
from __future__ import annotations

import struct
from typing import Dict, Iterable, List, Mapping

from core.csv_cells import list_values, number, typed_numbers


class DataError(ValueError):
    """Input data that the pipeline cannot use; the message says where and what to do."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + _varint(len(payload)) + payload


def _example(fields: List[bytes]) -> bytes:
    """Example { features (field 1): Features { the fields } }; no field set for a row of
    nothing but missing values, as protobuf writes an untouched message."""
    return _field(0x0A, b"".join(fields)) if fields else b""


class Encoder:
    """Rows of one header -> serialized tf.Examples, a batch at a time.

    The bytes are those of tf.train.Example.SerializeToString(deterministic=True) (map entries in
    key order), which ExampleGen hashes into the train/eval split: built here from precomputed
    pieces instead of a proto per row. Numbers are typed a column at a time
    (core.csv_cells.typed_numbers); any problem in a batch sends it through the cell-by-cell
    path, which raises the first one in row order, as precisely as ever.
    """

    def __init__(self, path: str, header: List[str], kinds: Mapping[str, str],
                 nulls: Iterable[str], separator: str = "|"):
        self.path, self.header, self.nulls = path, header, frozenset(nulls)
        self.separator = separator
        used = sorted((name, index) for index, name in enumerate(header)
                      if kinds[name] != "ignored")
        self.columns = [(index, name, kinds[name]) for name, index in used]
        # A Features.feature map entry: key (field 1), Feature (field 2), as a whole field of
        # Features. A number's entry is this head plus its 4 float32 bytes.
        self.number_head = {}
        for _, name, _kind in self.columns:
            entry = _field(0x0A, name.encode()) + b"\x12\x08\x12\x06\x0a\x04"
            self.number_head[name] = b"\x0a" + _varint(len(entry) + 4) + entry
        self.text_fields: Dict[tuple, bytes] = {}

    def _text_field(self, name: str, cell: str) -> bytes:
        field = self.text_fields.get((name, cell))
        if field is None:
            feature = _field(0x0A, _field(0x0A, cell.encode()))  # bytes_list { value }
            field = _field(0x0A, _field(0x0A, name.encode()) + _field(0x12, feature))
            if len(self.text_fields) < 100_000:  # categories repeat; free text need not
                self.text_fields[(name, cell)] = field
        return field

    def _list_field(self, name: str, kind: str, cell: str, line: int) -> bytes:
        """A list cell's feature: every value of `cell` (core/csv_cells.list_values: an empty
        cell an empty list, still present); raises DataError naming the value that cannot be
        one."""
        element = "numeric" if kind == "list_number" else "categorical"
        values, problem = list_values(cell, element, self.separator)
        if problem is not None:
            raise DataError(f"{self.path}, line {line}, column '{name}': {problem}")
        if kind == "list_text":
            payload = b"".join(_field(0x0A, v.encode()) for v in values)
            feature = _field(0x0A, payload)  # bytes_list { value... }
        else:
            packed = struct.pack(f"<{len(values)}f", *values)
            feature = _field(0x12, _field(0x0A, packed) if values else b"")  # float_list
        return _field(0x0A, _field(0x0A, name.encode()) + _field(0x12, feature))

    def encode(self, rows: List[List[str]], lines: List[int]) -> List[bytes]:
        width = len(self.header)
        if any(len(row) != width for row in rows):
            return self._encode_cell_by_cell(rows, lines)
        nulls, n = self.nulls, len(rows)
        per_column = []
        for index, name, kind in self.columns:
            cells = [row[index] for row in rows]
            if kind == "text":
                per_column.append((name, None, cells))
                continue
            if kind.startswith("list_"):
                try:
                    fields = [None if cell in nulls and cell != "" else
                              self._list_field(name, kind, cell, line)
                              for cell, line in zip(cells, lines, strict=True)]
                except DataError:
                    return self._encode_cell_by_cell(rows, lines)
                per_column.append((name, fields, None))
                continue
            present = [i for i, cell in enumerate(cells) if cell not in nulls]
            values = typed_numbers([cells[i] for i in present])
            if values is None:
                return self._encode_cell_by_cell(rows, lines)
            raw = values.astype("<f4").tobytes()
            head = self.number_head[name]
            fields = [None] * n
            for k, i in enumerate(present):
                fields[i] = head + raw[4 * k:4 * k + 4]
            per_column.append((name, fields, None))
        encoded = []
        text_field = self._text_field
        for i in range(n):
            parts = []
            for name, fields, cells in per_column:
                if fields is None:
                    cell = cells[i]
                    if cell not in nulls:
                        parts.append(text_field(name, cell))
                elif fields[i] is not None:
                    parts.append(fields[i])
            encoded.append(_example(parts))
        return encoded

    def _encode_cell_by_cell(self, rows: List[List[str]], lines: List[int]) -> List[bytes]:
        """The reference path: the first unusable cell or row, in order, raises DataError."""
        width = len(self.header)
        encoded = []
        for row, line in zip(rows, lines, strict=True):
            if len(row) != width:
                raise DataError(f"{self.path}, line {line}: {len(row)} cells where the header "
                                f"has {width}")
            parts = []
            for index, name, kind in self.columns:
                cell = row[index]
                if kind.startswith("list_") and cell == "":
                    parts.append(self._list_field(name, kind, cell, line))
                    continue
                if cell in self.nulls:
                    continue
                if kind.startswith("list_"):
                    parts.append(self._list_field(name, kind, cell, line))
                elif kind == "text":
                    parts.append(self._text_field(name, cell))
                else:
                    value = number(cell, self.path, line, name, DataError)
                    parts.append(self.number_head[name] + struct.pack("<f", value))
            encoded.append(_example(parts))
        return encoded
