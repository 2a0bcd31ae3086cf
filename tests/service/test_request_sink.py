"""The request sink (service/request_sink.py) as a real process against a real Kafka node:
records of the request log end up as serving-span CSV files, dated by record time, that the
pipeline's own reader reads (the label absent); bad records are skipped and counted while the
good ones around them are written; a sink SIGKILLed after writing and before committing,
restarted, leaves no duplicate row; SIGTERM writes what is buffered and stops cleanly.
One Kafka node for the module; each test has its own topic, group and serving base.
"""
from __future__ import annotations

import csv
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from core.config import load_config
from core.serving_log import make_record
from devtools.kafka_node import create_topic
from tests.helpers import REPO, dump_yaml, load_yaml
from tests.kafka_server import kafka_server  # noqa: F401  (fixture)
from tests.service.updater_harness import committed, produce, wait_until

pytestmark = pytest.mark.e2e
CONFIG = REPO / "configs" / "recommender_service.yaml"
PIPELINE = load_config(CONFIG.parent / "recommender.yaml")
JOINED = re.compile(r"request sink: group \S+ on topic \S+, writing \S+, metrics on :(\d+)")
DAY = datetime.datetime(2026, 11, 1, 23, 58, tzinfo=datetime.timezone.utc)
FAULT_ENV = "REQUEST_SINK_FAULT_INJECTION"


def record(n: int, time: datetime.datetime = DAY, **features) -> bytes:
    """A retrieve record whose history names it (sku<n> last), so a row tells its record."""
    values = {"user_click_history": [f"sku{1000 + n % 7}", f"sku{n}"], "hour": float(n % 24),
              "device": ("mobile", "desktop", "")[n % 3], **features}
    return make_record(values, "1796172913", "endpoint", "retrieve", now=time)


class Sink:
    """One `python -m service.request_sink` process, its log in a file."""

    def __init__(self, config: Path, bootstrap: str, log: Path, env: Optional[dict] = None,
                 instance_id: str = "", ready: re.Pattern = JOINED):
        self.log_path = log
        clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "service.request_sink", "--config", str(config),
                 "--bootstrap-servers", bootstrap, "--metrics-port", "0",
                 *(["--instance-id", instance_id] if instance_id else [])], cwd=REPO,
                env={**clean, **(env or {})}, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT)
        found = wait_until(lambda: ready.search(self.log) or self._exited(),
                           f"{ready.pattern!r} in the sink's log")
        self.port = int(found.group(1)) if ready is JOINED else None

    def _exited(self):
        if self.process.poll() is not None:
            raise AssertionError(f"the sink exited ({self.process.returncode}):\n{self.log}")

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> Dict[tuple, float]:
        from tests.service.updater_harness import Updater

        return Updater.metrics(self)

    def terminate(self, timeout_s: float = 30) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)


@pytest.fixture
def setup(kafka_server, tmp_path):  # noqa: F811
    """make(partitions, **sink): a fresh topic, a config whose request_sink section reads it and
    writes under tmp_path/requests, and a function that starts sinks on it (killed at the end
    if still running: the test failed)."""
    started: List[Sink] = []

    def make(partitions: int = 1, **sink):
        topic = f"requests-{uuid.uuid4().hex[:8]}"
        create_topic(kafka_server, topic, partitions)
        raw = load_yaml(CONFIG.read_text())
        raw["pipeline_config"] = str(CONFIG.parent / raw["pipeline_config"])
        raw["catalog"]["path"] = str((CONFIG.parent / raw["catalog"]["path"]).resolve())
        raw["request_sink"].update({"topic": topic, "group_id": f"g-{topic}",
                                    "serving_base": str(tmp_path / "requests"),
                                    "flush_s": 0.5, **sink})
        config = tmp_path / f"service-{topic}.yaml"
        config.write_text(dump_yaml(raw))

        def start(name: str = "sink", instance_id: str = "", ready: re.Pattern = JOINED,
                  **env) -> Sink:
            started.append(Sink(config, kafka_server.bootstrap, tmp_path / f"{name}.log", env,
                                instance_id, ready))
            return started[-1]
        return raw["request_sink"], start
    yield make
    for sink in started:
        if sink.process.poll() is None:
            sink.process.kill()
            sink.process.wait()


def span_rows(base: Path) -> Dict[str, List[Dict[str, str]]]:
    """{span folder: its files' rows} (csv.DictReader), every *.csv file."""
    found: Dict[str, List[Dict[str, str]]] = {}
    for path in sorted(base.glob("span-*/*.csv")):
        with open(path, newline="") as f:
            found.setdefault(path.parent.name, []).extend(csv.DictReader(f))
    return found


def row_count(base: Path) -> int:
    return sum(len(rows) for rows in span_rows(base).values())


def read_as_the_pipeline(path: Path) -> list:
    """The file's tf.Examples by the pipeline's reader (components/example_gen/csv_reader.py)
    on the recommender config's reader settings, as the skew check reads a serving span: the
    label None (no label column) and only the columns a `retrieve` request has (the candidate
    item and the ignored user id are no inputs of it)."""
    from components.example_gen.csv_reader import parse_csv

    features = {**PIPELINE.reader_features, "label": None, "ignored": [], "ids": {}}
    return list(parse_csv(str(path), path.read_text(), features, PIPELINE.data.null_markers))


def test_records_become_dated_span_files_that_the_pipeline_reads(setup, kafka_server,  # noqa
                                                                  tmp_path):
    """60 records on 2 partitions, either side of midnight UTC: each becomes one row of the
    span of its own day, in files the pipeline's reader types as it types the click log."""
    settings, start = setup(partitions=2)
    sink = start()
    times = [DAY + datetime.timedelta(minutes=n) for n in range(60)]  # 23:58 .. 00:57
    produce(kafka_server, settings["topic"], [record(n, t) for n, t in enumerate(times)],
            keys=[str(n).encode() for n in range(60)])
    base = tmp_path / "requests"
    wait_until(lambda: row_count(base) == 60, "60 rows in the span files")
    spans = span_rows(base)
    assert sorted(spans) == ["span-20261101", "span-20261102"]
    assert len(spans["span-20261101"]) == 2  # 23:58 and 23:59
    by_item = {row["user_click_history"].split("|")[1]: row for rows in spans.values()
               for row in rows}
    assert by_item["sku2"] == {"user_click_history": "sku1002|sku2", "hour": "2.0",
                               "device": "NA"}  # "" is the null marker
    assert by_item["sku4"]["device"] == "desktop"
    assert sorted(by_item["sku4"]) == ["device", "hour", "user_click_history"]  # no label
    for path in base.glob("span-*/*.csv"):
        assert re.fullmatch(r"retrieve-p[01]-o\d{12}-2026110[12]T\d{9}Z\.csv", path.name), path
        examples = read_as_the_pipeline(path)
        for example in examples:
            feature = example.features.feature
            item = feature["user_click_history"].bytes_list.value[1].decode()
            n = int(item[3:])
            assert feature["hour"].float_list.value == [float(n % 24)]
            assert list(feature["device"].bytes_list.value) == (
                [] if n % 3 == 2 else [("mobile", "desktop")[n % 3].encode()])
    metrics = wait_until(lambda: (m := sink.metrics())[("request_sink_records_buffered",)] == 0
                         and m, "an empty buffer")
    assert metrics[("request_sink_records_written_total",)] == 60
    assert sum(committed(kafka_server, settings["group_id"], settings["topic"], 2)) == 60
    assert sink.terminate() == 0


def bad_records() -> list:
    good = json.loads(record(0))
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)

    def changed(**keys) -> bytes:
        return json.dumps({**good, **keys}).encode()

    def feature(**values) -> bytes:
        return changed(features={**good["features"], **values})

    return [(b"{not json", "format"), (b"\xff\xfe", "format"), (None, "format"),
            (changed(schema=2), "format"), (changed(extra=1), "format"),
            (changed(time="yesterday"), "format"), (b"[" * 70_000, "format"),
            (changed(signature="../../etc/cron.d/x"), "signature"),
            (changed(signature=None), "signature"),
            (feature(hour="x2"), "value"), (feature(hour=1e39), "value"),
            (feature(hour=True), "value"), (feature(hour=[1.0]), "value"),
            (feature(device=3), "value"), (feature(device="a\nb"), "value"),
            (feature(user_click_history="sku1"), "value"),
            (feature(user_click_history=["sku1|sku2"]), "value"),
            (feature(user_click_history=[{"a": 1}]), "value"),
            (record(0, future), "time")]


def test_bad_records_are_counted_and_skipped_never_stopping_the_sink(setup, kafka_server,  # noqa
                                                                     tmp_path):
    settings, start = setup()
    sink = start()
    bad = bad_records()
    values = [record(1)] + [value for value, _ in bad] + [record(2)]
    produce(kafka_server, settings["topic"], values)
    base = tmp_path / "requests"
    wait_until(lambda: sum(committed(kafka_server, settings["group_id"], settings["topic"]))
               == len(values), "every offset committed")
    rows = [row for rows in span_rows(base).values() for row in rows]
    assert sorted(r["user_click_history"] for r in rows) == ["sku1001|sku1", "sku1002|sku2"]
    for path in base.glob("span-*/*.csv"):
        read_as_the_pipeline(path)  # the reader refuses none of what was written
    metrics = sink.metrics()
    expected = {reason: sum(1 for _, r in bad if r == reason)
                for reason in ("format", "signature", "value", "time")}
    assert {reason: metrics[("request_sink_records_bad_total", reason)]
            for reason in expected} == expected
    assert metrics[("request_sink_records_written_total",)] == 2
    assert "bad record at" in sink.log and sink.process.poll() is None
    assert not list(base.rglob("*etc*")) and not list(tmp_path.rglob("cron.d"))
    assert sink.terminate() == 0


def test_killed_after_writing_before_committing_leaves_no_duplicate(setup, kafka_server,  # noqa
                                                                    tmp_path):
    """The first sink is SIGKILLed right after its first flush wrote its files (40 records,
    two days), before the commit; the second, cutting its batches differently (25 records),
    reads them again and every record is one row, once."""
    settings, start = setup(flush_records=40, flush_s=600)
    times = [DAY + datetime.timedelta(seconds=30 * n) for n in range(100)]
    produce(kafka_server, settings["topic"], [record(n, t) for n, t in enumerate(times)])
    # Static membership: the restart takes the partition back at once, not after the killed
    # member's session times out.
    first = start("first", instance_id="sink-0", **{FAULT_ENV: "kill-after-write:1"})
    assert first.process.wait(60) == -signal.SIGKILL, first.log
    base = tmp_path / "requests"
    assert row_count(base) == 40
    assert committed(kafka_server, settings["group_id"], settings["topic"]) == [-1001]

    config = Path(first.process.args[first.process.args.index("--config") + 1])
    raw = load_yaml(config.read_text())
    raw["request_sink"]["flush_records"], raw["request_sink"]["flush_s"] = 25, 0.5
    config.write_text(dump_yaml(raw))
    second = start("second", instance_id="sink-0")
    wait_until(lambda: committed(kafka_server, settings["group_id"], settings["topic"])
               == [100], "offset 100 committed")
    items = [row["user_click_history"].split("|")[1]
             for rows in span_rows(base).values() for row in rows]
    assert sorted(items) == sorted(f"sku{n}" for n in range(100))  # each once
    assert second.terminate() == 0


def test_sigterm_writes_the_buffer_commits_and_leaves(setup, kafka_server, tmp_path):  # noqa
    settings, start = setup(flush_records=100_000, flush_s=3600)
    sink = start()
    produce(kafka_server, settings["topic"], [record(n) for n in range(30)])
    wait_until(lambda: sink.metrics()[("request_sink_records_buffered",)] == 30,
               "30 records buffered")
    base = tmp_path / "requests"
    assert row_count(base) == 0  # nothing is due before the stop
    assert sink.terminate() == 0, sink.log
    assert row_count(base) == 30
    assert committed(kafka_server, settings["group_id"], settings["topic"]) == [30]
    assert "consumer closed, left group" in sink.log
    assert not list(base.rglob(".*.tmp"))


def test_a_missing_topic_is_said_at_once_and_the_sink_waits(setup, tmp_path):
    """The brokers create no topic: a sink on a topic that does not exist says so, naming the
    config key, and waits (no exit, a clean stop)."""
    _, start = setup()
    config = next(tmp_path.glob("service-*.yaml"))
    raw = load_yaml(config.read_text())
    raw["request_sink"]["topic"] = missing = f"absent-{uuid.uuid4().hex[:8]}"
    config.write_text(dump_yaml(raw))
    sink = start(ready=re.compile(rf"topic '{missing}' \(request_sink.topic\) does not exist"))
    time.sleep(2)
    assert sink.process.poll() is None
    assert sink.terminate() == 0 and "consumer closed, left group" in sink.log
