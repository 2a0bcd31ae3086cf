"""`make service-up`: the recommender service on this machine, serving the pushed recommender.

    python -m devtools.service_up up       # Kafka, Redis, TF Serving, the updater, the endpoint
    python -m devtools.service_up status   # what runs, where its log is
    python -m devtools.service_up down     # stops what `up` started, and nothing else

`up` starts, each on loopback and each waited for until it answers:
1. the recommender's pushed model: when its serving folder holds no version, the pipeline runs
   first (`python -m pipeline.run --config configs/recommender.yaml`, ~90 s on 2 cores);
2. Redis (Debian's redis-server) and Kafka (one KRaft node from the pinned Maven jars: `make
   tools`), each on a free port, with the click topic (2 partitions), its dead-letter topic and
   the request log's topic (`requests`, 2 partitions, kept REQUESTS_RETENTION_MS: 7 days);
3. TF Serving at the service config's `tf_serving.url` (REST) and `grpc_target` (gRPC):
   `tensorflow_model_server` when it is on PATH, else the stand-in that answers TF Serving's REST
   and gRPC APIs from the pushed SavedModel through the TF1 loader (devtools/tf_serving; said so
   in the output), its gRPC on a free port that the endpoint is given;
4. the history updater (`python -m service.updater`), the request sink (`python -m
   service.request_sink`: the logged requests as serving spans under request_sink.serving_base,
   where the recommender's night reads them) and the recommend endpoint (`python -m
   service.endpoint`) at the service config's ports, pointed at the above;
5. a few click events for the demo user (DEMO_USER) through Kafka, the real path, waited for
   until the endpoint answers from their history.
Everything lives in outputs/service/ (logs/, the servers' data, state.json: the processes `down`
stops, each checked by its command line so that a reused pid is never signalled).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, Dict, List, Optional

from devtools.loopback import REPO, ServiceUnavailable, wait_until_answering

CONFIG = REPO / "configs" / "recommender_service.yaml"
FOLDER = REPO / "outputs" / "service"
DEMO_USER = "u00042"
# The demo user's clicks, oldest first (items of the bundled click log).
DEMO_CLICKS = ("sku1091", "sku1258", "sku1220", "sku1315", "sku1077")
PARTITIONS = 2
# The request log's topic keeps a week: the sink writes each record within flush_s, and a
# week leaves room for a sink that was down over a long weekend.
REQUESTS_RETENTION_MS = 7 * 86400 * 1000
READY_TIMEOUT_S = 120


def _step(what: str, start: Callable[[], str]) -> str:
    began = time.monotonic()
    print(f"  > {what} ...", flush=True)
    detail = start()
    print(f"  ✓ {what}: {detail} ({time.monotonic() - began:.1f} s)", flush=True)
    return detail


def _get(url: str, timeout: float = 2.0) -> tuple:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _post(url: str, body: dict, timeout: float = 5.0) -> tuple:
    request = urllib.request.Request(url, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def wait_for(what: str, ready: Callable[[], bool], process: Optional[subprocess.Popen],
             log: Optional[Path], timeout_s: float = READY_TIMEOUT_S) -> None:
    """Until ready() is true; raises naming `what`, its exit status and its log's tail."""
    def tail() -> str:
        text = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
        return f"its log ({log}):\n{text}"

    wait_until_answering(process, ready, what, tail, timeout_s, poll_s=0.2)


class Stack:
    """The processes of one `up`, recorded in state.json as they start."""

    def __init__(self, folder: Path):
        self.folder, self.logs = folder, folder / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.state: Dict[str, dict] = {}

    def record(self, name: str, process: subprocess.Popen, log: Path, **facts) -> None:
        self.state[name] = {"pid": process.pid, "started": _start_time(process.pid),
                            "log": str(log), **facts}
        (self.folder / "state.json").write_text(json.dumps(self.state, indent=2))

    def spawn(self, name: str, args: List[str], **facts) -> tuple:
        log = self.logs / f"{name}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(log, "wb") as out:
            process = subprocess.Popen(args, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True)
        self.record(name, process, log, **facts)
        return process, log


def _start_time(pid: int) -> Optional[int]:
    """When the process started (clock ticks since boot, /proc/<pid>/stat field 22): fixed at
    fork, unlike the command line (redis-server rewrites its own), so a pid the kernel reused
    for another process never matches. None: no such process, or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def _pushed_version(service) -> Path:
    from devtools.tf_serving.__main__ import newest_version

    base = service.model_versions_path()
    version = newest_version(base)
    if version is None:
        print(f"  no pushed version in {base}: running the recommender pipeline first",
              flush=True)
        result = subprocess.run([sys.executable, "-m", "pipeline.run", "--config",
                                 str(service.pipeline_config)], cwd=REPO)
        version = newest_version(base)
        if result.returncode != 0 or version is None:
            raise ServiceUnavailable(f"the pipeline run pushed no version to {base} (exit "
                                     f"{result.returncode}); see its output above")
    return base / str(version)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def _printed_grpc_target(log: Path) -> Optional[str]:
    """The stand-in's gRPC address, from the line it prints once both its APIs listen; None
    before. The line comes after both listen (devtools/tf_serving/__main__.py): REST may
    answer before it is printed."""
    found = re.search(r" and gRPC (\S+:\d+) ", log.read_text(errors="replace"))
    return found.group(1) if found else None


def wait_for_tf_serving(tf_url: str, model: str, grpc_target: Optional[str],
                        process: subprocess.Popen, log: Path) -> str:
    """Until TF Serving answers REST for model and, for the stand-in (grpc_target None), has
    printed its gRPC address; returns the gRPC address."""
    wait_for("TF Serving", lambda: _get(f"{tf_url}/v1/models/{model}")[0] == 200 and bool(
        grpc_target or _printed_grpc_target(log)), process, log)
    return grpc_target or _printed_grpc_target(log)


def _create_topics(server, service) -> str:
    from devtools.kafka_node import create_topic

    kafka, requests = service.kafka, service.request_sink.topic
    create_topic(server, kafka.topic, PARTITIONS)
    create_topic(server, kafka.dead_letter_topic, 1)
    create_topic(server, requests, PARTITIONS, **{"retention.ms": str(REQUESTS_RETENTION_MS)})
    return (f"{kafka.topic} ({PARTITIONS} partitions), {kafka.dead_letter_topic}, {requests} "
            f"({PARTITIONS} partitions, kept {REQUESTS_RETENTION_MS // 86_400_000} days)")


def _send_demo_clicks(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    from core.click_history import ClickEvent
    from service.events import encode

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    now = int(time.time() * 1000) - len(DEMO_CLICKS) * 60_000
    for i, item in enumerate(DEMO_CLICKS):
        event = ClickEvent(f"demo-{uuid.uuid4()}", DEMO_USER, item, now + i * 60_000)
        producer.produce(topic, encode(event), key=DEMO_USER.encode())
    if producer.flush(30):
        raise ServiceUnavailable(f"Kafka at {bootstrap} did not take the demo clicks")


def up(config_path: Path, folder: Path) -> int:
    from service.config import load_service_config
    from devtools import kafka_node, redis_node

    if (folder / "state.json").exists() and any(_alive(p) for p in _read_state(folder).values()):
        print(f"the service already runs ({folder / 'state.json'}): `make service-down` first")
        return 1
    service = load_service_config(config_path)
    found = {}
    _step("the recommender's pushed model",
          lambda: str(found.setdefault("version", _pushed_version(service))))
    version_dir = found["version"]
    stack = Stack(folder)
    for name in ("redis", "kafka"):
        shutil.rmtree(folder / name, ignore_errors=True)
    redis = redis_node.start(folder / "redis")
    stack.record("redis", redis.process, folder / "redis" / "redis.log", url=redis.url)
    print(f"  ✓ Redis: {redis.url}", flush=True)
    kafka = kafka_node.start(folder / "kafka")
    stack.record("kafka", kafka.process, folder / "kafka" / "server.log",
                 bootstrap=kafka.bootstrap)
    print(f"  ✓ Kafka: {kafka.bootstrap}", flush=True)
    _step("topics", lambda: _create_topics(kafka, service))

    tf_url, grpc_target = service.tf_serving.url, service.tf_serving.grpc_target
    model, base = service.model_name, version_dir.parent
    real = shutil.which("tensorflow_model_server")
    if real:
        args = [real, f"--rest_api_port={_port(tf_url)}", f"--port={_port(grpc_target)}",
                f"--model_name={model}", f"--model_base_path={base}",
                "--enable_model_warmup=true"]
        kind = "tensorflow_model_server"
    else:  # the stand-in's gRPC on a free port (never a taken 8500), read from its first line
        grpc_target = None
        args = [sys.executable, "-m", "devtools.tf_serving", "--model-base-path", str(base),
                "--model-name", model, "--port", str(_port(tf_url)), "--grpc-port", "0",
                "--server-version",
                service.pipeline.serving.tf_serving_version]
        kind = "the TF Serving stand-in (no tensorflow_model_server here: devtools/tf_serving)"
    process, log = stack.spawn("tf_serving", args, url=tf_url)
    grpc_target = wait_for_tf_serving(tf_url, model, grpc_target, process, log)
    print(f"  ✓ TF Serving: {kind}, {model} version {version_dir.name} at {tf_url} and gRPC "
          f"{grpc_target}", flush=True)

    process, log = stack.spawn("updater", [
        sys.executable, "-m", "service.updater", "--config", str(config_path),
        "--bootstrap-servers", kafka.bootstrap, "--redis-url", redis.url])
    metrics = f"http://127.0.0.1:{service.updater.metrics_port}/metrics"
    wait_for("the history updater", lambda: _get(metrics)[0] == 200, process, log)
    print(f"  ✓ history updater: metrics at {metrics}", flush=True)

    serving_base = service.request_sink.serving_base_path(service.pipeline)
    process, log = stack.spawn("request_sink", [
        sys.executable, "-m", "service.request_sink", "--config", str(config_path),
        "--bootstrap-servers", kafka.bootstrap], url=str(serving_base))
    metrics = f"http://127.0.0.1:{service.request_sink.metrics_port}/metrics"
    wait_for("the request sink", lambda: _get(metrics)[0] == 200, process, log)
    print(f"  ✓ request sink: serving spans under {serving_base}, metrics at {metrics}",
          flush=True)

    endpoint = f"http://{service.endpoint.host}:{service.endpoint.port}"
    process, log = stack.spawn("endpoint", [
        sys.executable, "-m", "service.endpoint", "--config", str(config_path),
        "--redis-url", redis.url, "--tf-serving-url", tf_url,
        "--tf-serving-grpc-target", grpc_target, "--bootstrap-servers", kafka.bootstrap],
        url=endpoint)
    admin = f"http://{service.endpoint.host}:{service.endpoint.admin_port}"
    wait_for("the recommend endpoint", lambda: _get(f"{admin}/readyz")[0] == 200, process, log)
    print(f"  ✓ recommend endpoint: {endpoint} (admin: {admin}/metrics, /readyz; OpenAPI: "
          f"{admin}/docs)", flush=True)

    _send_demo_clicks(kafka.bootstrap, service.kafka.topic)
    wait_for(f"{DEMO_USER}'s clicks in Redis", lambda: _post(
        f"{endpoint}/v1/recommend", {"user_id": DEMO_USER, "k": 3})[1].get("history") == "redis",
        None, Path(stack.state["updater"]["log"]), timeout_s=60)
    print(f"  ✓ {len(DEMO_CLICKS)} clicks of {DEMO_USER} went through Kafka into Redis",
          flush=True)
    print(f"\nready; try:\n  curl -s -X POST {endpoint}/v1/recommend -H 'Content-Type: "
          f"application/json' \\\n    -d '{{\"user_id\": \"{DEMO_USER}\", \"k\": 5}}'\n"
          f"logs: {stack.logs}; stop: make service-down")
    return 0


def _read_state(folder: Path) -> Dict[str, dict]:
    path = folder / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _alive(entry: dict) -> bool:
    return entry.get("started") is not None and _start_time(entry["pid"]) == entry["started"]


def down(folder: Path) -> int:
    state = _read_state(folder)
    if not state:
        print(f"nothing to stop: no {folder / 'state.json'}")
        return 0
    # The clients first, the servers last: the updater commits and leaves its group cleanly.
    for name in ("endpoint", "request_sink", "updater", "tf_serving", "kafka", "redis"):
        entry = state.get(name)
        if entry is None or not _alive(entry):
            continue
        os.kill(entry["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _alive(entry) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(entry):
            os.kill(entry["pid"], signal.SIGKILL)
        print(f"  stopped {name} (pid {entry['pid']})")
    (folder / "state.json").unlink()
    return 0


def status(folder: Path) -> int:
    state = _read_state(folder)
    if not state:
        print("not running (make service-up)")
        return 1
    for name, entry in state.items():
        where = entry.get("url") or entry.get("bootstrap") or ""
        print(f"  {name:<12} {'up' if _alive(entry) else 'DOWN':<5} {where:<28} {entry['log']}")
    return 0 if all(_alive(e) for e in state.values()) else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--folder", type=Path, default=FOLDER)
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            return up(args.config.resolve(), args.folder.resolve())
        return down(args.folder) if args.action == "down" else status(args.folder)
    except ServiceUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        if args.action == "up":
            down(args.folder.resolve())
        return 1
    except BaseException:
        if args.action == "up":  # nothing half-started is left running
            down(args.folder.resolve())
        raise


if __name__ == "__main__":
    raise SystemExit(main())
