"""The request sink's settings and record checks without Kafka (fast): request_sink.serving_base
is where the recommender's skew check reads by default, resolved against the service config's
folder; a record's cells are held to the pipeline reader's rules (service/request_span.py)."""
from __future__ import annotations

import datetime
import json

import pytest

from core.serving_log import make_record
from service.config import load_service_config
from service.request_span import MAX_RECORD_BYTES, Refused, SpanLayout
from tests.helpers import REPO, dump_yaml, load_yaml

CONFIG = REPO / "configs" / "recommender_service.yaml"
NOW = datetime.datetime(2026, 12, 4, 12, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def service():
    return load_service_config(CONFIG)


def test_the_bundled_serving_base_is_where_the_skew_check_reads(service, tmp_path):
    pipeline = service.pipeline
    bundled = service.request_sink.serving_base_path(pipeline)
    assert bundled == REPO / "outputs" / "recommender" / "requests"
    assert bundled == pipeline.runner.output_dir / "requests"  # the skew check's default
    raw = load_yaml(CONFIG.read_text())
    raw["pipeline_config"] = str(CONFIG.parent / raw["pipeline_config"])
    raw["catalog"]["path"] = str((CONFIG.parent / raw["catalog"]["path"]).resolve())
    raw["request_sink"]["serving_base"] = "spans"  # relative: to the file's folder
    (tmp_path / "service.yaml").write_text(dump_yaml(raw))
    assert load_service_config(tmp_path / "service.yaml").request_sink.serving_base == \
        tmp_path / "spans"
    del raw["request_sink"]["serving_base"]  # unset: the pipeline's output_dir/requests
    (tmp_path / "service.yaml").write_text(dump_yaml(raw))
    moved = load_service_config(tmp_path / "service.yaml")
    assert moved.request_sink.serving_base_path(moved.pipeline) == bundled


def good(**features) -> dict:
    return {"user_click_history": ["sku1", "sku2"], "hour": 3.0, "device": "mobile", **features}


@pytest.mark.parametrize("raw, reason, words", [
    (None, "format", "a tombstone"),
    (b"x" * (MAX_RECORD_BYTES + 1), "format", "more than"),
    (b"{", "format", "not JSON"),
    (make_record(good(), "1", "endpoint", "../x", now=NOW), "signature", "'../x'"),
    (make_record(good(hour="3"), "1", "endpoint", "retrieve", now=NOW), "value", "'hour'"),
    (make_record(good(hour=3.5e38), "1", "endpoint", "retrieve", now=NOW), "value",
     "out of float32 range"),
    (make_record(good(hour=False), "1", "endpoint", "retrieve", now=NOW), "value", "bool"),
    (make_record(good(device=["a"]), "1", "endpoint", "retrieve", now=NOW), "value",
     "where text is expected"),
    (make_record(good(device="a\rb"), "1", "endpoint", "retrieve", now=NOW), "value",
     "line break"),
    (make_record(good(user_click_history=["a|b"]), "1", "endpoint", "retrieve", now=NOW),
     "value", "list separator"),
    (make_record(good(user_click_history={"a": 1}), "1", "endpoint", "retrieve", now=NOW),
     "value", "where a list is expected"),
    (make_record(good(), "1", "endpoint", "retrieve",
                 now=NOW + datetime.timedelta(minutes=6)), "time", "later than"),
])
def test_a_record_the_reader_would_refuse_is_refused_with_its_reason(service, raw, reason,
                                                                     words):
    layout = SpanLayout(service.pipeline)
    with pytest.raises(Refused) as refused:
        layout.record(raw, NOW + datetime.timedelta(minutes=5))
    assert refused.value.reason == reason and words in str(refused.value)


def test_what_the_reader_reads_passes_and_is_written_in_the_click_logs_layout(service):
    layout = SpanLayout(service.pipeline)
    raw = make_record(good(hour=None, device="", extra="dropped"), "1", "endpoint", "retrieve",
                      now=NOW)
    record = layout.record(raw, NOW)
    assert layout.text([record], "retrieve") == "hour,device,user_click_history\nNA,NA,sku1|sku2\n"
    raw = json.dumps({**json.loads(raw), "signature": "raw_features"}).encode()
    assert layout.text([layout.record(raw, NOW)], "raw_features").splitlines()[0] == \
        "hour,device,item_id,user_click_history"  # the candidate too: every model input
