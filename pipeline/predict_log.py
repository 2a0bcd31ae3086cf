"""pipeline.predict's request log (`--log-requests DIR`, issue 45 item 1): the rows it sends, as
the serving span the nightly skew check reads, for the tabular examples' local runs (the
recommend endpoint logs through Kafka and the request sink instead; service/request_sink.py).

Each row of an answered request is drawn with probability --log-sample-rate (default 1) and
made a core/serving_log.py record (source `predict`, the signature, the signature's raw inputs
as sent: a list unpadded, a missing value null), read back by
read_record and written when the run ends (after an error too: what was answered before it), as
one CSV file per UTC day, `DIR/span-YYYYMMDD/predict-<UTC time>-<pid>.csv`, in span_rows'
layout (the label absent), durably (write_span_file): the layout the sink writes.
"""
from __future__ import annotations

import datetime
import os
import random
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from core.serving_log import (make_record, read_record, signature_inputs, span_folder,
                              span_rows, write_span_file)


class RequestLog:
    """The sampled rows of one run, written to DIR by close()."""

    def __init__(self, folder: Path, config, signature: str, sample_rate: float,
                 rng: Optional[random.Random] = None):
        self.folder, self.config, self.signature = Path(folder), config, signature
        self.sample_rate = sample_rate
        self.columns = signature_inputs(config, signature)
        self.rng = rng or random.Random()
        self.records: List[Dict] = []

    def add(self, rows: Sequence[Dict], now: Optional[datetime.datetime] = None) -> None:
        """Logs a sample of `rows` (each row's values, as sent) at `now` (default: now)."""
        for values in rows:
            if self.rng.random() < self.sample_rate:
                # No model version: a span file has no column for it (span_rows).
                raw = make_record({name: values[name] for name in self.columns}, None,
                                  "predict", self.signature, now=now)
                self.records.append(read_record(raw))

    def close(self) -> List[Path]:
        """Writes the logged rows, one file per day; the files written."""
        by_day: Dict[str, List[Dict]] = {}
        for record in self.records:
            by_day.setdefault(span_folder(record["time"]), []).append(record)
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        written = []
        data = self.config.data
        for span, records in sorted(by_day.items()):
            text = span_rows(records, self.columns, list(self.config.features.lists),
                             data.list_separator, data.null_markers[0])
            written.append(write_span_file(self.folder, span,
                                           f"predict-{stamp}-{os.getpid()}.csv", text))
        self.records = []
        return written
