"""The CSV reader behind components/example_gen/component.py: data files by span, byte-range splits,
checked headers, and typed rows as serialized tf.Examples. TensorFlow (tf.io.gfile, for gs:// and
s3:// paths) but no TFX or Beam, so the error type and the row parser load quickly for the CLI,
the drift gate, the report and tests.

The columns are typed from the config instead of guessed. TFX's own CSV reader infers types and has
no notion of null markers, so a numeric column with "NA" cells becomes text. This one declares:
numeric columns are floats, categorical ones are text, the label is text (a class name, "0" and
"1" included) or, in a regression (the features' `label_kind` "number",
PipelineConfig.reader_features), a float; null markers are missing values (absent from the
tf.Example), ignored columns are dropped.
Anything else (a missing, unexpected or repeated column, a cell that is not a number the model
can take: core/csv_cells.py, NaN and infinity included; an empty file) stops the run with the
file, line, column and value.

Each file is read in byte ranges of SPLIT_BYTES (a Beam runner spreads them over workers: a big
file is not one worker's job and memory follows the range); every range checks the file's header.
A range is read and decoded in blocks of whole lines (BLOCK_BYTES); rows are parsed by the csv
module, typed a column at a time and serialized without a proto per row (example_encoder.py, beside
this module, TF-free).
"""
from __future__ import annotations

import collections
import csv
import io
import os
import re
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import tensorflow as tf

from components.example_gen.example_encoder import DataError, Encoder

# A file is read in byte ranges of this size, which a Beam runner may read on different workers;
# memory per worker follows the range, not the file.
SPLIT_BYTES = 32 * 1024 * 1024
# Rows typed together, a column at a time.
BATCH_ROWS = 4096
# A range is read and decoded this many bytes at a time (whole lines).
BLOCK_BYTES = 1 << 20
# The longest line read whole outside the blocks (the header, the rest of a row at a split's
# edge): a file without line breaks must not be read into memory at once.
MAX_LINE_BYTES = 16 << 20
# Python's csv module refuses a longer cell (csv.field_size_limit's default, 128 KiB).
MAX_CELL_BYTES = csv.field_size_limit()


# The span placeholders data.file_pattern may hold, and what each matches in a file's path.
SPAN_SPECS = {"{SPAN}": r"(?P<span>\d+)", "{YYYY}": r"(?P<year>\d{4})",
              "{MM}": r"(?P<month>\d{2})", "{DD}": r"(?P<day>\d{2})"}


def _span_of(match: re.Match) -> int:
    groups = match.groupdict()
    if groups.get("span") is not None:
        return int(groups["span"])
    # TFX's own day numbering ({YYYY}{MM}{DD} patterns only): imported here, so the reader
    # loads without TFX.
    from tfx.components.example_gen import utils as example_gen_utils

    return example_gen_utils.date_to_span_number(
        int(groups["year"]), int(groups["month"]), int(groups["day"]))


def files_in_window(input_base: str, file_pattern: str, newest_span: int, window: int
                    ) -> Dict[int, List[str]]:
    """Files of the newest `window` spans up to newest_span, by span number."""
    glob_pattern, regex = file_pattern, re.escape(file_pattern)
    for spec, group in SPAN_SPECS.items():
        glob_pattern = glob_pattern.replace(spec, "*")
        regex = regex.replace(re.escape(spec), group)
    regex = regex.replace(r"\*", "[^/]*")
    by_span: Dict[int, List[str]] = {}
    for path in tf.io.gfile.glob(os.path.join(input_base, glob_pattern)):
        match = re.fullmatch(regex, os.path.relpath(path, input_base))
        if match:
            by_span.setdefault(_span_of(match), []).append(path)
    spans = sorted(s for s in by_span if s <= newest_span)[-window:]
    return {span: sorted(by_span[span]) for span in spans}


def _column_kinds(features: Mapping[str, Any]) -> Dict[str, str]:
    """Each column's kind; `features` as core.config.PipelineConfig.reader_features sends them,
    every key present; a serving span's (components/skew_gate) have label None: no label column."""
    kinds = ({features["label"]: features["label_kind"]} if features["label"] is not None
             else {})
    kinds.update({name: "number" for name in features["numeric"]})
    kinds.update({name: "text" for name in features["categorical"]})
    kinds.update({name: "text" for name in features["ids"]})
    kinds.update({name: f"list_{'number' if column['element'] == 'numeric' else 'text'}"
                  for name, column in features["lists"].items()})
    kinds.update({name: "ignored" for name in features["ignored"]})
    return kinds


def _cell_too_big(path: str, line: int, error: csv.Error) -> DataError:
    return DataError(f"{path}, line {line}: {error}: a cell is at most {MAX_CELL_BYTES} "
                     "characters; is a quote left open (the rest of the file read as one "
                     "cell)? Close it, or shorten the cell")


def readline(f, path: str, line) -> bytes:
    """One line (with its "\\n"), at most MAX_LINE_BYTES, from a GFile (whose readline takes no
    limit): read in pieces, the file left just after the line. `line`: its number, or a function
    that computes it (only for the error: counting lines reads the file)."""
    start, data = f.tell(), b""
    while True:
        piece = f.read(min(BLOCK_BYTES, MAX_LINE_BYTES + 1 - len(data)))
        cut = piece.find(b"\n")
        if cut >= 0:
            data += piece[:cut + 1]
            f.seek(start + len(data))
            return data
        data += piece
        if not piece:
            return data
        if len(data) > MAX_LINE_BYTES:
            number = line() if callable(line) else line
            raise DataError(f"{path}, line {number}: over {MAX_LINE_BYTES >> 20} MiB without a "
                            "line break: a CSV file holds one row per line (is this a CSV file?)")


def _checked_header(path: str, line: str, kinds: Mapping[str, str]) -> List[str]:
    try:
        header = next(csv.reader([line]), None) if line.strip() else None
    except csv.Error as error:
        raise _cell_too_big(path, 1, error) from None
    if not header or not any(h.strip() for h in header):
        raise DataError(f"{path} is empty: a data file needs a header line and at least one row")
    header = [h.strip() for h in header]
    counts = collections.Counter(header)  # one pass: a header may hold 100,000 columns
    duplicated = sorted(h for h, n in counts.items() if n > 1)
    if duplicated:
        raise DataError(f"{path}: column(s) {duplicated} appear more than once in the header; "
                        "name each column once")
    columns = set(header)
    missing = [c for c in kinds if c not in columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {missing}; every file needs the columns "
                        f"declared in the config's features ({list(kinds)})")
    unexpected = [c for c in header if c not in kinds]
    if unexpected:
        raise DataError(f"{path}: unexpected column(s) {unexpected}; declare them under "
                        "features (numeric, categorical, ids, lists, or ignored) in the config")
    return header


def _encoded_rows(path: str, header: List[str], lines: Iterator[str], first_line: Any,
                  features: Mapping[str, Any], null_markers: List[str]) -> Iterator[bytes]:
    """Serialized examples of the rows read from `lines` (csv rows may span lines).

    first_line: the file line number of the first line, or a function that computes it (a later
    split only needs it to name a line in an error)."""
    encoder = Encoder(path, header, _column_kinds(features), null_markers,
                       features["list_separator"])
    reader = csv.reader(lines)
    base = None
    rows: List[List[str]] = []
    starts: List[int] = []
    consumed = 0
    for row in _rows(reader, path, lambda: (first_line() if callable(first_line)
                                            else first_line)):
        start, consumed = consumed, reader.line_num
        if not row:
            continue
        rows.append(row)
        starts.append(start)
        if len(rows) == BATCH_ROWS:
            base = base if base is not None else (first_line() if callable(first_line)
                                                  else first_line)
            yield from encoder.encode(rows, [base + s for s in starts])
            rows, starts = [], []
    if rows:
        base = base if base is not None else (first_line() if callable(first_line)
                                              else first_line)
        yield from encoder.encode(rows, [base + s for s in starts])


def _rows(reader, path: str, first_line) -> Iterator[List[str]]:
    """reader's rows; a cell over the csv module's limit is a DataError naming its line."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise _cell_too_big(path, first_line() + reader.line_num - 1, error) from None
        yield row


def parse_csv(path: str, text: str, features: Mapping[str, Any], null_markers: List[str]
              ) -> Iterator[tf.train.Example]:
    """tf.Examples from one CSV file's text; raises DataError on the first unusable cell."""
    lines = io.StringIO(text)
    header = _checked_header(path, lines.readline(), _column_kinds(features))
    count = 0
    for serialized in _encoded_rows(path, header, lines, 2, features, null_markers):
        count += 1
        yield tf.train.Example.FromString(serialized)
    if count == 0:
        raise DataError(f"{path} has a header but no rows")


def count_rows(path: str) -> int:
    """The rows after the header (csv records, blank lines skipped), read a block at a time: the
    run report counts every file it names, and a whole-file read held 4M rows' text at once."""
    with tf.io.gfile.GFile(path, "rb") as f:
        size = tf.io.gfile.stat(path).length
        reader = csv.reader(_lines_until(f, 0, size, None, path))
        records = sum(1 for row in _rows(reader, path, lambda: 1) if row)
    return max(records - 1, 0)


def file_splits(path: str, split_bytes: int) -> List[Tuple[str, int, int]]:
    """(path, start, end) byte ranges that cover the file; a row belongs to the range its first
    byte is in."""
    size = tf.io.gfile.stat(path).length
    return [(path, start, min(start + split_bytes, size))
            for start in range(0, max(size, 1), split_bytes)]


def read_split(split: Tuple[str, int, int], settings: Mapping[str, Any]) -> Iterator[bytes]:
    """Serialized examples of the rows that start in one byte range of a file. Every split
    checks the file's header (the same error from each); the first also checks for rows."""
    path, start, end = split
    features, nulls = settings["features"], settings["null_markers"]
    with tf.io.gfile.GFile(path, "rb") as f:
        line = readline(f, path, 1)
        try:
            text = line.decode()
        except UnicodeDecodeError as error:
            raise _not_utf8(path, 1, line[error.start:error.end], error.start) from None
        header = _checked_header(path, text, _column_kinds(features))
        position = f.tell()
        if start > 0:
            f.seek(start - 1)
            # The rest of a row begun earlier.
            position = start - 1 + len(readline(f, path, lambda: _line_of(path, start - 1)))
        first_line = 2 if start == 0 else (lambda: _line_of(path, position))
        size = tf.io.gfile.stat(path).length
        lines = _lines_until(f, position, end, path if start > 0 or end < size else None, path)
        count = 0
        for serialized in _encoded_rows(path, header, lines, first_line, features, nulls):
            count += 1
            yield serialized
    if start == 0 and count == 0 and end >= size:
        raise DataError(f"{path} has a header but no rows")


def _not_utf8(path: str, line_number: int, bad: bytes, at: int) -> DataError:
    """The error for bytes that are not UTF-8: the file, line, the bytes and where in the line
    (`at`: their 0-based byte offset in it)."""
    return DataError(
        f"{path}, line {line_number}: bytes {bad!r} at character {at + 1} are not UTF-8; save "
        "the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`, naming the encoding it was written "
        "in)")


def _lines_until(f, position: int, end: int, split_file: Optional[str], path: str
                 ) -> Iterator[str]:
    """Lines from `position` up to the first line that starts a row at or past `end`, decoded a
    block of about BLOCK_BYTES at a time (memory follows the block, not the range or the file).

    A quoted cell holding a newline is read whole in a file of one split (the split ends at the
    file's end, so its rows never cross `end`). In a file read in several splits a line with an
    odd number of quotes is refused: a split boundary may fall inside such a cell, and no reader
    of that split can tell a row from the rest of a cell (split_file names the file then)."""
    pending, pending_at = b"", position  # bytes read that end no line yet, and their offset
    while position < end:
        chunk = f.read(min(BLOCK_BYTES, end - position))
        if not chunk:
            break
        position += len(chunk)
        data = pending + chunk
        if position >= end and not data.endswith(b"\n"):
            # The rest of the row begun before `end`.
            data += readline(f, path, lambda at=position: _line_of(path, at))
        cut = len(data) if position >= end else data.rfind(b"\n") + 1
        block, pending = data[:cut], data[cut:]
        if block:
            yield from _block_lines(block, pending_at, split_file, path)
        pending_at += len(block)
    if pending:
        yield from _block_lines(pending, pending_at, split_file, path)


def _block_lines(block: bytes, block_start: int, split_file: Optional[str], path: str
                 ) -> Iterator[str]:
    """A block of whole lines (from file offset block_start) as text lines."""
    if split_file is not None and b'"' in block:
        at = block_start
        for line in block.split(b"\n"):
            if line.count(b'"') % 2:
                raise DataError(
                    f"{split_file}, line {_line_of(split_file, at)}: a quoted cell "
                    f"spans lines; files over {SPLIT_BYTES >> 20} MiB are read in parallel "
                    "splits and cannot hold one: remove the line break from the cell, or split "
                    "the file")
            at += len(line) + 1
    try:
        text = block.decode()
    except UnicodeDecodeError as error:
        line_start = block.rfind(b"\n", 0, error.start) + 1
        raise _not_utf8(path, _line_of(path, block_start + line_start),
                        block[error.start:error.end], error.start - line_start) from None
    yield from io.StringIO(text)  # lines split at "\n" only, as the csv module expects


def _line_of(path: str, offset: int) -> int:
    """The file line number of the line that starts at byte `offset` (error messages only)."""
    newlines, done = 0, 0
    with tf.io.gfile.GFile(path, "rb") as f:
        while done < offset:
            chunk = f.read(min(1 << 22, offset - done))
            if not chunk:
                break
            newlines += chunk.count(b"\n")
            done += len(chunk)
    return newlines + 1

