"""What of a request-log record (core/serving_log.py) goes into the serving span, checked so that
the pipeline's reader reads every file the request sink writes (service/request_sink.py). TF-free.

A record that read_record accepts may still hold what the reader refuses, and one refused cell
stops the whole night's reading of its span; so each value is held to the reader's own rules
(core/csv_cells.py) before it is written, and a record that breaks one is counted bad, by a
reason of a fixed set (REASONS: bounded metric labels):

  format     not a schema 1 record (read_record's BadRecord), or larger than MAX_RECORD_BYTES
  signature  not one of SIGNATURES (the signature names a file: nothing else may)
  value      a feature the reader would refuse: a number that is no float32 (NaN, infinity,
             1e39, true), text in a number's place, a list of something else, a value holding a
             line break, a list value holding data.list_separator
  time       dated later than the sink's clock plus request_sink.max_clock_skew_s

Features that are not the signature's inputs are left out; an input the record lacks is the
null marker (span_rows).
"""
from __future__ import annotations

import datetime
import numbers
from typing import Dict, List, Optional, Sequence

from core.csv_cells import number_problem
from core.serving_log import BadRecord, cell_text, read_record, signature_inputs, span_rows

# The signatures a record may name: components/trainer/export.py's, as the endpoint
# (retrieve) and the predict client (any) call them.
SIGNATURES = ("retrieve", "raw_features", "serving_default")
REASONS = ("format", "signature", "value", "time")
# The endpoint's records are a few hundred bytes; a larger one is no request it logged.
MAX_RECORD_BYTES = 64 * 1024


class Refused(ValueError):
    """A record the span does not take; `reason` is one of REASONS."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class SpanLayout:
    """The serving span's columns and cells by the pipeline config."""

    def __init__(self, pipeline):
        features = pipeline.features
        self.numeric = set(features.numeric)
        self.lists = {name: column.element for name, column in features.lists.items()}
        self.separator = pipeline.data.list_separator
        self.null_marker = pipeline.data.null_markers[0]
        self.columns: Dict[str, List[str]] = {
            signature: signature_inputs(pipeline, signature) for signature in SIGNATURES
            if signature != "retrieve" or pipeline.retrieval is not None}

    def record(self, raw: Optional[bytes], latest: datetime.datetime) -> Dict:
        """The checked record of a message's value; raises Refused."""
        if raw is None or len(raw) > MAX_RECORD_BYTES:
            raise Refused("format", "a tombstone" if raw is None else
                          f"{len(raw)} bytes, more than {MAX_RECORD_BYTES}")
        try:
            record = read_record(raw)
        except BadRecord as bad:
            raise Refused("format", str(bad)) from None
        signature = record.get("signature")
        if signature not in self.columns:
            raise Refused("signature", f"signature {str(signature)[:80]!r} is not one of "
                          f"{sorted(self.columns)}")
        if record["time"] > latest:
            raise Refused("time", f"time {record['time'].isoformat()} is later than "
                          f"{latest.isoformat()} (the sink's clock plus max_clock_skew_s)")
        for name in self.columns[signature]:
            problem = self._problem(name, record["features"].get(name))
            if problem:
                raise Refused("value", f"feature {name!r}: {problem}")
        return record

    def _problem(self, name: str, value) -> Optional[str]:
        if value is None:
            return None
        if name in self.lists:
            if not isinstance(value, list):
                return f"{type(value).__name__} where a list is expected"
            for element in value:
                problem = self._scalar(element, self.lists[name] == "numeric", str(element))
                if problem is None and self.separator in str(element):
                    problem = f"{str(element)[:80]!r} holds the list separator {self.separator!r}"
                if problem:
                    return problem
            return None
        written = cell_text(value)
        return self._scalar(value, name in self.numeric, written)

    @staticmethod
    def _scalar(value, numeric: bool, written: str) -> Optional[str]:
        if numeric:
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                return f"{type(value).__name__} {str(value)[:80]!r} where a number is expected"
            return number_problem(written)[1]
        if not isinstance(value, str):
            return f"{type(value).__name__} where text is expected"
        if "\n" in value or "\r" in value:
            return "text holding a line break"
        return None

    def text(self, records: Sequence[Dict], signature: str) -> str:
        """One span file's CSV text: the signature's columns, a row per record."""
        return span_rows(records, self.columns[signature], list(self.lists), self.separator,
                         self.null_marker)
