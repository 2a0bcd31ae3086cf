"""core/serving_log.py: a span's cells read back as the values the client sent."""
import csv
import io

from core.serving_log import make_record, read_record, span_rows


def test_a_float_cell_reads_back_as_the_same_value():
    values = [1234567.0, 0.1 + 0.2, 1e-7, 3.0]
    records = [read_record(make_record({"x": v}, None, "predict", "raw_features"))
               for v in values]
    rows = list(csv.DictReader(io.StringIO(span_rows(records, ["x"], [], "|", "NA"))))
    assert [float(r["x"]) for r in rows] == values
