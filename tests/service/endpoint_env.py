"""What the endpoint's tests share (tests/service/test_endpoint*.py): a model base of two
versions' retrieval_items.json, a catalog with sensitive columns, a canned `retrieve` for the
TF Serving stand-in, the endpoint served in-process by uvicorn, and the guard that checks every
response for sensitive fields."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator, List

import httpx
import redis

from core.click_history import ClickEvent
from service.history_store import HistoryStore
from service.config import ServiceConfig, load_service_config
from devtools.tf_serving.rest_stub import RestStub
from service.endpoint.app import create_app
from tests.helpers import REPO

K = 10
V1_ITEMS = [f"sku{1000 + i}" for i in range(40)]
V2_ITEMS = [f"sku{1100 + i}" for i in range(20)] + V1_ITEMS[:5]
SENSITIVE = ("price", "unit_cost")


def write_version(base: Path, version: int, items: List[str], k: int = K) -> Path:
    folder = base / str(version) / "assets.extra"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "retrieval_items.json").write_text(json.dumps(
        {"schema": 1, "feature": "item_id", "k": k, "items": items}))
    return folder.parent


def write_catalog(path: Path) -> Path:
    """sku1000..sku1029 (later items are not in it), with distinctive sensitive values."""
    lines = ["item_id,title,category,price,unit_cost"]
    lines += [f"sku{1000 + i},thing {i},cat{i % 3},{9000 + i}.99,{8000 + i}.11" for i in range(30)]
    path.write_text("\n".join(lines) + "\n")
    return path


def sensitive_values(catalog: Path) -> set:
    import csv

    with catalog.open(newline="") as f:
        return {row[name] for row in csv.DictReader(f) for name in SENSITIVE if row[name]}


def canned_retrieve(vocabulary: List[str], k: int = K):
    """A deterministic `retrieve`: the history's items newest first, then the vocabulary from
    a position the history picks; scores 0.95, 0.90, ..."""
    def answer(history: List[str]) -> List[str]:
        seed = sum(map(ord, "|".join(history)))
        rotated = vocabulary[seed % len(vocabulary):] + vocabulary[:seed % len(vocabulary)]
        return ([*reversed(history)] + [i for i in rotated if i not in history])[:k]

    def predict(signature: str, instances: list) -> list:
        assert signature == "retrieve", signature
        out = []
        for instance in instances:
            ids = answer([h for h in instance["user_click_history"] if h])
            out.append({"item_ids": ids,
                        "scores": [round(0.95 - 0.05 * i, 2) for i in range(len(ids))]})
        return out

    predict.answer = answer
    return predict


# Budgets a loaded CI machine keeps, for the tests of answers rather than of budgets: with the
# repo's 20 ms a slow first Redis read (connect included) is the popularity fallback, not the
# answer or error a test asserts (a CI run beside the Flink nights). The p99 objective grows with
# them, as load_service_config requires; the budget tests set their own.
REDIS_TIMEOUT_MS, TF_TIMEOUT_MS, P99_OBJECTIVE_MS = 1000, 3000, 5000


def with_test_budgets(raw: dict) -> dict:
    """raw (a service config as YAML loads it) with REDIS_TIMEOUT_MS and its kin."""
    raw["redis"]["timeout_ms"], raw["tf_serving"]["timeout_ms"] = REDIS_TIMEOUT_MS, TF_TIMEOUT_MS
    raw["endpoint"]["p99_objective_ms"] = P99_OBJECTIVE_MS
    return raw


def service_config(tmp_path: Path, redis_url: str, tf_url: str,
                   redis_timeout_ms: int = REDIS_TIMEOUT_MS, tf_timeout_ms: int = TF_TIMEOUT_MS,
                   auth: dict = None, request_log: dict = None,
                   kafka: dict = None, **endpoint) -> ServiceConfig:
    raw = load_service_config(REPO / "configs" / "recommender_service.yaml").model_dump()
    raw["redis"].update(url=redis_url, timeout_ms=redis_timeout_ms)
    # The REST stand-in (RestStub); test_endpoint_grpc.py drives the gRPC client.
    raw["tf_serving"].update(url=tf_url, protocol="rest", timeout_ms=tf_timeout_ms,
                             refresh_s=0.1)
    raw["catalog"]["path"] = write_catalog(tmp_path / "items.csv")
    raw["endpoint"].update(max_body_bytes=16384, **endpoint)
    raw["model_base_path"] = tmp_path / "models"
    if auth is not None:  # the repo's file says mode none (loopback development)
        raw["auth"] = auth
    # Off unless a test asks (tests/service/test_request_log.py): the repo's file logs to the
    # Kafka of `make service-up`, which a test's requests must not reach.
    raw["request_log"] = {"enabled": False} if request_log is None else request_log
    raw["kafka"].update(kafka or {})
    return ServiceConfig.model_validate(raw)


class SensitiveGuard:
    """An httpx response hook: no response carries a sensitive field's name, and no JSON
    string in it is one of the sensitive columns' values."""

    def __init__(self, names: Iterable[str], values: Iterable[str]):
        self.names, self.values = tuple(names), set(values)
        self.checked = 0

    def __call__(self, response: httpx.Response) -> None:
        response.read()
        self.check(response.text)

    def check(self, text: str) -> None:
        for name in self.names:
            assert name not in text, f"sensitive field {name!r} in a response: {text[:300]}"
        try:
            document = json.loads(text)
        except ValueError:
            document = None
        stack = [document]
        while stack:
            value = stack.pop()
            if isinstance(value, dict):
                stack.extend(value.keys())
                stack.extend(value.values())
            elif isinstance(value, list):
                stack.extend(value)
            elif isinstance(value, str):
                assert value not in self.values, f"sensitive value {value!r} in a response"
        self.checked += 1


@contextlib.contextmanager
def served(app, timeout_s: float = 10, lifespan: str = "on") -> Iterator[str]:
    """The app served by uvicorn (uvloop, httptools) in a thread on a free port; its URL.
    The admin app (app.state.admin) with lifespan "off": the public app's opens what both
    share."""
    import uvicorn

    config = uvicorn.Config(app, host="127.0.0.1", port=0, loop="uvloop", http="httptools",
                            access_log=False, log_level="warning", lifespan=lifespan)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout_s)


def wait_for(predicate, timeout_s: float = 5, what: str = "a condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def metric(client: httpx.Client, name: str, **labels) -> float:
    """A sample's value from /metrics (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v
                                           for k, v in labels.items()):
                return sample.value
    return 0.0


@dataclasses.dataclass
class Env:
    """One endpoint with its Redis and TF Serving stand-in."""
    stub: RestStub
    redis: object
    store: HistoryStore
    client: httpx.Client
    guard: SensitiveGuard
    admin: httpx.Client  # the admin port: /healthz, /readyz, /metrics, /docs, /openapi.json
    app: object
    predict: object

    def clicks(self, user: str, items) -> None:
        for t, item in enumerate(items):
            self.store.apply(ClickEvent(f"{user}-{t}", user, item, 1_700_000_000_000 + t))

    def recommend(self, **body) -> httpx.Response:
        return self.client.post("/v1/recommend", json=body)


@contextlib.contextmanager
def make_env(tmp_path, redis_url: str, **settings) -> Iterator[Env]:
    """Two versions' items under tmp_path/models (the stand-in serves version 1), the
    endpoint served, a client whose every response the SensitiveGuard checks."""
    base = tmp_path / "models"
    write_version(base, 1, V1_ITEMS)
    write_version(base, 2, V2_ITEMS)
    predict = canned_retrieve(V1_ITEMS)
    with RestStub("recommender", predict, versions=[1]) as stub:
        service = service_config(tmp_path, redis_url, stub.url, **settings)
        app = create_app(service)
        guard = SensitiveGuard(SENSITIVE, sensitive_values(service.catalog.path))
        client = redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=5)
        store = HistoryStore.from_service_config(client, service)
        with served(app) as url, served(app.state.admin, lifespan="off") as admin_url, \
                httpx.Client(base_url=url, timeout=10,
                             event_hooks={"response": [guard]}) as http, \
                httpx.Client(base_url=admin_url, timeout=10) as admin:
            yield Env(stub, client, store, http, guard, admin, app, predict)
        assert guard.checked > 0
