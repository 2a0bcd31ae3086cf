"""The recommender service end to end, brought up by the README's one command (`make service-up`:
devtools/service_up.py) against the recommender's pushed model (tests/conftest.py
pushed_recommender): Kafka and Redis on loopback, the TF Serving stand-in answering `retrieve` from
the SavedModel through the TF1 loader (devtools/tf_serving), the history updater and the recommend
endpoint, each a fresh process.

Click events for some users go into Kafka; `recommend` for each returns the top k that a direct
`retrieve` call with the offline function's history (core/click_history.py histories) returns; a
user with no history gets the popularity fallback (the version's most frequent items); no answer
carries a sensitive catalog field. `down` stops every process `up` started."""
from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import time
import urllib.request

import pytest

from core.click_history import ClickEvent, HistorySpec, histories
from devtools.loopback import free_port
from tests.helpers import REPO, dump_yaml, load_yaml
from tests.service.endpoint_env import with_test_budgets

pytestmark = pytest.mark.e2e
SENSITIVE = ("price", "unit_cost")


def _post(url: str, body: dict) -> tuple:
    request = urllib.request.Request(url, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            raw = answer.read()
            status = answer.status
    except urllib.error.HTTPError as error:
        raw, status = error.read(), error.code
    text = raw.decode()
    for field in SENSITIVE:  # on every answer of this module
        assert f'"{field}"' not in text, text
    return status, json.loads(text)


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name) and not line.startswith("#")]
    return sum(values)


@pytest.fixture(scope="module")
def service(pushed_recommender, tmp_path_factory):
    folder = tmp_path_factory.mktemp("service")
    config = load_yaml((REPO / "configs" / "recommender_service.yaml").read_text())
    config["pipeline_config"] = str(pushed_recommender.config_path)
    config["catalog"]["path"] = str(REPO / "data" / "catalog" / "items.csv")
    config["tf_serving"]["url"] = f"http://127.0.0.1:{free_port()}"
    config["endpoint"]["port"] = free_port()
    config["endpoint"]["admin_port"] = free_port()
    config["updater"]["metrics_port"] = free_port()
    with_test_budgets(config)  # the answers compared are Redis's histories', not fallbacks
    # Every retrieve request logged, and the sink's spans in the test's folder.
    config["request_log"]["sample_rate"] = 1.0
    config["request_sink"].update({"metrics_port": free_port(), "flush_s": 0.5,
                                   "serving_base": str(folder / "requests")})
    path = folder / "service.yaml"
    path.write_text(dump_yaml(config))
    command = [sys.executable, "-m", "devtools.service_up"]
    up = subprocess.run([*command, "up", "--config", str(path), "--folder", str(folder / "run")],
                        cwd=REPO, capture_output=True, text=True, timeout=600)
    state_file = folder / "run" / "state.json"
    started = json.loads(state_file.read_text()) if state_file.exists() else {}
    try:
        assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
        state = json.loads(state_file.read_text())
        yield {"config": config, "path": path, "state": state, "up": up.stdout,
               "endpoint": f"http://127.0.0.1:{config['endpoint']['port']}",
               "updater_metrics": f"http://127.0.0.1:{config['updater']['metrics_port']}/metrics",
               "version": pushed_recommender.version_dir, "requests": folder / "requests"}
    finally:
        down = subprocess.run([*command, "down", "--folder", str(folder / "run")], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stdout + down.stderr
        assert not state_file.exists()
        from devtools.service_up import _alive

        # Every process `up` started is gone (a CI run once left the updater running).
        assert [name for name, entry in started.items() if _alive(entry)] == [], down.stdout


GRPC_PREDICTS = (':tensorflow:serving:request_latency_count{model_name="recommender",'
                 'API="Predict",entrypoint="GRPC"}')


def _events(users, items, rng) -> list:
    """Clicks with repeats and out of order, a few per user, times in the last hour."""
    now = int(time.time() * 1000)
    events = []
    for user in users:
        for n in range(rng.randrange(3, 16)):
            events.append(ClickEvent(f"{user}-{n}", user, rng.choice(items),
                                     now - rng.randrange(3_600_000)))
    rng.shuffle(events)
    return events


def test_clicks_through_kafka_give_what_a_direct_retrieve_of_the_offline_history_gives(service):
    from confluent_kafka import Producer

    from service.config import load_service_config
    from service.events import encode

    assert "make service-down" in service["up"]
    items = json.loads((service["version"] / "assets.extra" / "retrieval_items.json")
                       .read_text())["items"]
    rng = random.Random(29)
    users = [f"e2e-user-{i}" for i in range(6)]
    events = _events(users, items[:60], rng)
    producer = Producer({"bootstrap.servers": service["state"]["kafka"]["bootstrap"]})
    applied_before = _metric(service["updater_metrics"], "history_updater_events_applied_total")
    for event in events:
        producer.produce(service["config"]["kafka"]["topic"], encode(event),
                         key=event.user_id.encode())
    assert producer.flush(30) == 0
    deadline = time.monotonic() + 60
    while _metric(service["updater_metrics"], "history_updater_events_applied_total") \
            < applied_before + len(events):
        assert time.monotonic() < deadline, "the updater did not apply every event in 60 s"
        time.sleep(0.2)

    spec = load_service_config(REPO / "configs" / "recommender_service.yaml").history_spec()
    assert spec == HistorySpec(length=10, keep="last", separator="|")
    offline = histories(events, spec)
    tf_serving = service["config"]["tf_serving"]["url"]
    grpc_before = _metric(f"{tf_serving}/monitoring/prometheus/metrics", GRPC_PREDICTS)
    for user in users:
        status, answer = _post(f"{service['endpoint']}/v1/recommend",
                               {"user_id": user, "k": 10,
                                "context": {"hour": 20, "device": "mobile"}})
        assert status == 200, answer
        assert answer["history"] == "redis", answer
        assert answer["model_version"] == service["version"].name
        # The direct call: the offline history, padded as the client pads a batch of one.
        _, direct = _post(f"{tf_serving}/v1/models/recommender:predict", {
            "signature_name": "retrieve",
            "instances": [{"user_click_history": offline[user], "hour": 20.0,
                           "device": "mobile"}]})
        [expected] = direct["predictions"]
        assert [i["item_id"] for i in answer["items"]] == expected["item_ids"]
        # The endpoint called over gRPC (tf_serving.protocol's default), the direct call REST.
        assert _metric(f"{tf_serving}/monitoring/prometheus/metrics", GRPC_PREDICTS) \
            > grpc_before, "the endpoint's retrieve calls did not go over gRPC"
        assert all(math.isclose(i["score"], s, rel_tol=1e-5, abs_tol=1e-6)
                   for i, s in zip(answer["items"], expected["scores"], strict=True))
        catalog_fields = set().union(*(set(i) for i in answer["items"]))
        assert {"item_id", "score", "title", "category"} <= catalog_fields


def test_a_user_without_history_gets_the_popularity_fallback(service):
    items = json.loads((service["version"] / "assets.extra" / "retrieval_items.json")
                       .read_text())["items"]
    status, answer = _post(f"{service['endpoint']}/v1/recommend",
                           {"user_id": "someone-new", "k": 5})
    assert status == 200, answer
    assert answer["history"] == "fallback"
    assert [i["item_id"] for i in answer["items"]] == items[:5]
    status, answer = _post(f"{service['endpoint']}/v1/recommend",
                           {"user_id": "../../etc/passwd", "k": 5})
    assert status == 400 and answer["field"] == "user_id", answer


def test_logged_requests_become_rows_of_todays_serving_span(service):
    """Each retrieve request the endpoint sends is logged (sample_rate 1 here) through the
    `requests` topic to the request sink, which writes it as a row of today's serving span:
    the history and context as sent, no user column."""
    import csv
    import datetime

    from core.serving_log import span_folder

    def rows() -> list:
        found = []
        for path in sorted(service["requests"].glob("span-*/*.csv")):
            with open(path, newline="") as f:
                found.extend(csv.DictReader(f))
        return found

    items = json.loads((service["version"] / "assets.extra" / "retrieval_items.json")
                       .read_text())["items"]
    def tablet() -> list:  # this test's rows: no other test of the module sends "tablet"
        return [row for row in rows() if row["device"] == "tablet"]

    assert tablet() == []
    for hour in (3, 4, 5):  # a history (recent_item_ids), so the endpoint calls retrieve
        status, answer = _post(f"{service['endpoint']}/v1/recommend",
                               {"user_id": "someone-logged", "k": 3,
                                "recent_item_ids": items[:2],
                                "context": {"hour": hour, "device": "tablet"}})
        assert status == 200 and answer["history"] == "redis", answer
    # Counted by device, not against a count taken before: the earlier tests' rows may still be
    # on their way through Kafka (a CI run read three of theirs as these).
    deadline = time.monotonic() + 60
    while len(tablet()) < 3:
        assert time.monotonic() < deadline, f"{len(tablet())} of 3 rows in 60 s"
        time.sleep(0.2)
    time.sleep(1)  # flush_s 0.5: a fourth (duplicate) row would be written by now
    logged = tablet()
    assert sorted(float(row["hour"]) for row in logged) == [3.0, 4.0, 5.0]  # repr: "3.0"
    assert set(logged[0]) == {"user_click_history", "hour", "device"}
    assert all(row["user_click_history"] == "|".join(items[:2]) for row in logged)
    today = span_folder(datetime.datetime.now(datetime.timezone.utc))
    assert {p.parent.name for p in service["requests"].glob("span-*/*.csv")} == {today}
    assert "request_sink" in service["state"]


# Issue 45, item 4: skew planted in the served traffic, found by the next night. The bursts are
# devtools/request_burst.py (`make service-burst`), through the endpoint, Kafka and the sink.

def _sink_rows(folder) -> int:
    return sum(len(p.read_text().splitlines()) - 1 for p in folder.glob("span-*/*.csv"))


def _burst(service, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "devtools.request_burst", "--config",
                           str(service["path"]), *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def _burst_span(service, serving_base, *args):
    """The burst's rows as a serving span of their own under serving_base: the files the sink
    wrote for it, moved out of the sink's folder (which this module's other tests read), once
    the sink has written what came before."""
    quiet, last = time.monotonic(), _sink_rows(service["requests"])
    while time.monotonic() - quiet < 2:  # flush_s 0.5: two seconds without a new row
        time.sleep(0.2)
        if _sink_rows(service["requests"]) != last:
            quiet, last = time.monotonic(), _sink_rows(service["requests"])
    before = set(service["requests"].glob("span-*/*.csv"))
    burst = _burst(service, *args)
    assert burst.returncode == 0, burst.stdout + burst.stderr
    new = sorted(set(service["requests"].glob("span-*/*.csv")) - before)
    assert new, burst.stdout
    for path in new:
        (serving_base / path.parent.name).mkdir(parents=True, exist_ok=True)
        path.rename(serving_base / path.parent.name / path.name)
    return burst


def _night(pushed_recommender, folder, serving_base, on_skew):
    """The recommender's next night on the same data (ExampleGen.. from cache: a copy of the
    pushed night's metadata store and serving folder), its skew check reading serving_base."""
    import shutil

    from tests.helpers import run_cli, write_config

    pushed_recommender.copy_metadata(folder / "outputs")
    models = pushed_recommender.version_dir.parent
    shutil.copytree(models, folder / "serving" / models.name)
    config = write_config(folder, {"skew.serving_base": str(serving_base),
                                   "skew.on_skew": on_skew},
                          name="recommender.yaml", source=REPO / "configs" / "recommender.yaml")
    night = run_cli("pipeline.run", "--config", str(config), timeout=1200)
    [result] = (folder / "outputs").rglob("skew.json")
    [report] = (folder / "outputs" / "reports").glob("run-*/report.md")
    return night, json.loads(result.read_text()), report.read_text()


def test_a_context_value_outside_its_domain_is_refused_and_never_logged(service):
    """endpoint.context_domains: a device training never had is a 400, and what is refused
    never reaches the model or the request log."""
    burst = _burst(service, "--requests", 20, "--shift", "device=smart-fridge")
    assert burst.returncode == 1, burst.stdout + burst.stderr
    assert "answers: 20 x 400" in burst.stdout and "device" in burst.stdout, burst.stdout
    assert "logged 0 of them" in burst.stdout, burst.stdout
    time.sleep(2)  # the sink's flush_s is 0.5
    assert all("smart-fridge" not in p.read_text()
               for p in service["requests"].glob("span-*/*.csv"))


def test_shifted_traffic_stops_the_next_night_naming_exactly_the_shifted_features(
        service, pushed_recommender, tmp_path):
    """Every request at hour 3 with its history cut to one item: the night's SkewGate (on_skew
    stop) fails the run naming exactly hour and user_click_history, and skew.json and the
    report name exactly them, worst first; device, drawn as in training, is not named."""
    import re

    serving_base = tmp_path / "requests"
    burst = _burst_span(service, serving_base, "--requests", 300, "--shift", "hour=3",
                        "--history-cut", 1)
    assert "answers: 300 x 200" in burst.stdout, burst.stdout
    night, result, report = _night(pushed_recommender, tmp_path / "night", serving_base, "stop")
    output = night.stdout + night.stderr
    assert night.returncode == 1, output[-3000:]
    messages = [line for line in output.splitlines() if "is skewed from the training" in line]
    assert messages, output[-3000:]
    for message in messages:  # the console's line, and the log's
        assert set(re.findall(r"'([a-z_]+)'", message)) == {"hour", "user_click_history"}, \
            message
    assert result["rows"]["serving"] == 300 and result["serving_span"], result
    skewed = [f["feature"] for f in result["features"] if f["skewed"]]
    assert sorted(skewed) == ["hour", "user_click_history"], result["features"]
    assert [f["feature"] for f in result["features"][:2]] == skewed  # worst first
    ratios = [f["distance"] / f["threshold"] for f in result["features"][:2]]
    assert ratios == sorted(ratios, reverse=True), result["features"]
    assert result["missing"] == [] and result["unseen"] == [], result
    [line] = [line for line in report.splitlines() if "Serving skew:" in line]
    assert "2 feature(s) beyond the threshold" in line and "(on skew: stop)" in line, line
    assert line.index(skewed[0] + " (") < line.index(skewed[1] + " ("), line
    assert "device (" not in line, line


def test_unshifted_traffic_passes_the_gate(service, pushed_recommender, tmp_path):
    """Requests drawn from the click log's newest span as they are: the same night, on_skew
    stop, runs through, its report saying no feature is beyond its threshold."""
    serving_base = tmp_path / "requests"
    _burst_span(service, serving_base, "--requests", 300)
    night, result, report = _night(pushed_recommender, tmp_path / "night", serving_base, "stop")
    assert night.returncode == 0, (night.stdout + night.stderr)[-3000:]
    assert result["serving_span"] and result["rows"]["serving"] == 300, result
    assert not result["skewed"], result
    [line] = [line for line in report.splitlines() if "Serving skew:" in line]
    assert "no feature beyond its threshold" in line, line
