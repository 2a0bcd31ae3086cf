"""The recommend endpoint's latency beside a direct `retrieve` call, from concurrent local clients.

    .venv/bin/python -m bench.service_latency [--items 100000] [--concurrency 4] [--seconds 8]

A SavedModel with the recommender's `retrieve` signature (inputs user_click_history [None, None]
string, hour [None] float, device [None] string; outputs item_ids and scores [None, k]) over
`--items` seeded random item embeddings: a vocabulary lookup of the history, the masked mean of
its embeddings, a dense layer with hour and device, then the export's brute-force top k
(components/trainer/retrieval.py BruteForceTopK) over every item. It is served by the TF Serving
stand-in (devtools/tf_serving, the TF1 session loader) in a process of its own; Redis holds a
10-item history for each of 1,000 users; the endpoint (`python -m service.endpoint`) runs in a
process of its own against both.

Measured, in the same run and taking turns (one round of each, `--rounds` times):
- direct: POST :predict `retrieve` to the stand-in with a user's history (what the endpoint sends);
- endpoint: POST /v1/recommend for that user (Redis read, validation, the same retrieve call,
  the catalog join, the answer), the endpoint calling TF Serving over gRPC (tf_serving.protocol's
  default; the stand-in's gRPC port);
- endpoint-rest: the same against a second endpoint process calling TF Serving's REST API
  (--tf-serving-protocol rest; issue 44, item 2);
- endpoint+jwt: the first against a third endpoint process with auth.mode jwt (a JWKS file of
  an RSA key made at start, an RS256 token per user verified on each request; issue 42, item 5);
- endpoint+log: the first against a fourth endpoint process with the request log on at
  sample_rate 1.0, the worst case (every request a record, its user hashed, produced to a
  `requests` topic of a real single-node Kafka, devtools/kafka_node.py; issue 45, item 1); the
  other endpoint processes log nothing. Goal: its P99 within 5 % of `endpoint`'s;
each from `--concurrency` client threads with keep-alive connections, closed loop. Then an open
loop against the endpoint at rising request rates (latency counted from each request's scheduled
time, so a queue shows), to the highest rate whose P99 stays under the 100 ms objective.
Goals (issue 29): endpoint P99 <= 1.5x direct P99, and far under 100 ms at 100,000 items. Last,
the closed loop against the endpoint with the stand-in frozen (SIGSTOP; --no-brownout skips it):
P50/P99/max and the answers by fallback_reason, the circuit breaker open after its first
failures (issue 42). No assertions: it prints tables.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parent.parent
OBJECTIVE_MS = 100.0
GOAL_RATIO = 1.5
LOG_GOAL_RATIO = 1.05  # the request log's cost (issue 45): endpoint+log P99 / endpoint P99
USERS = 1000
DEVICES = ("mobile", "desktop", "tablet")


def build_model(folder: Path, items: int, dim: int, k: int) -> List[str]:
    """Writes version 1 of the synthetic recommender under folder/; returns the item ids."""
    import numpy as np
    import tensorflow as tf

    from components.trainer.retrieval import BruteForceTopK, retrieval_signature

    rng = np.random.default_rng(31)
    ids = [f"sku{i:06d}" for i in range(items)]
    embeddings = rng.normal(size=(items + 1, dim)).astype(np.float32)
    embeddings[0] = 0.0  # padding and unknown ids
    root = tf.Module()
    root.table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant(ids), tf.range(1, items + 1, dtype=tf.int64)), default_value=0)
    root.item_embeddings = tf.Variable(embeddings, trainable=False)
    root.dense = tf.Variable(rng.normal(size=(dim + 1 + len(DEVICES), dim)).astype(np.float32)
                             / np.sqrt(dim), trainable=False)
    root.devices = tf.constant(DEVICES)
    root.top_k = BruteForceTopK(embeddings[1:], ids, k)

    def query(inputs):
        history = root.table.lookup(inputs["user_click_history"])            # [B, n]
        vectors = tf.gather(root.item_embeddings, history)                   # [B, n, d]
        present = tf.cast(history > 0, tf.float32)[..., None]
        mean = tf.reduce_sum(vectors * present, 1) / tf.maximum(tf.reduce_sum(present, 1), 1.0)
        hour = tf.where(tf.math.is_nan(inputs["hour"]), 0.0, inputs["hour"] / 24.0)[:, None]
        device = tf.cast(tf.equal(inputs["device"][:, None], root.devices[None, :]), tf.float32)
        return tf.tanh(tf.matmul(tf.concat([mean, hour, device], 1), root.dense))

    signature = retrieval_signature(root.top_k, query, {
        "user_click_history": tf.TensorSpec([None, None], tf.string, name="user_click_history"),
        "hour": tf.TensorSpec([None], tf.float32, name="hour"),
        "device": tf.TensorSpec([None], tf.string, name="device")})
    version = folder / "1"
    tf.saved_model.save(root, str(version), signatures={"retrieve": signature})
    (version / "assets.extra").mkdir(exist_ok=True)
    (version / "assets.extra" / "retrieval_items.json").write_text(json.dumps(
        {"schema": 1, "feature": "item_id", "k": k, "items": ids}))
    return ids


def _catalog(path: Path, ids: List[str]) -> None:
    with open(path, "w") as f:
        f.write("item_id,title,category,price,unit_cost\n")
        for n, item in enumerate(ids):
            f.write(f"{item},item {n},cat{n % 8},{n % 97 + 0.99:.2f},{n % 31 + 0.5:.2f}\n")


def _wait(url: str, process: subprocess.Popen, timeout_s: float = 180) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout_s} s")


def _closed_loop(call, requests: List[dict], threads: int, seconds: float) -> List[float]:
    """Latencies (ms) of `call(client, body)` from `threads` keep-alive clients for `seconds`."""
    import httpx

    latencies: List[float] = []
    lock, stop = threading.Lock(), time.monotonic() + seconds

    def worker(offset: int) -> None:
        own: List[float] = []
        with httpx.Client(timeout=10) as client:
            n = offset
            while time.monotonic() < stop:
                body = requests[n % len(requests)]
                start = time.perf_counter()
                call(client, body)
                own.append((time.perf_counter() - start) * 1000)
                n += threads
        with lock:
            latencies.extend(own)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return latencies


def _open_loop(url: str, requests: List[dict], rate: float, seconds: float) -> Dict[str, float]:
    """Requests at a fixed rate (asyncio, one pooled client); latency from the scheduled time."""
    import asyncio

    import httpx

    async def run() -> Dict[str, float]:
        latencies, errors = [], 0
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
        async with httpx.AsyncClient(timeout=5, limits=limits) as client:
            start, tasks = time.perf_counter(), []

            async def one(n: int, due: float) -> None:
                nonlocal errors
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                try:
                    answer = await client.post(url, json=requests[n % len(requests)])
                    if answer.status_code != 200:
                        errors += 1
                except httpx.HTTPError:
                    errors += 1
                latencies.append((time.perf_counter() - due) * 1000)

            for n in range(int(rate * seconds)):
                tasks.append(asyncio.create_task(one(n, start + n / rate)))
            await asyncio.gather(*tasks)
        return {"rate": rate, "p50": _pct(latencies, 50), "p99": _pct(latencies, 99),
                "errors": errors, "count": len(latencies)}

    return asyncio.run(run())


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _means(url: str) -> Dict[str, float]:
    """Histogram means (seconds) from a Prometheus text page: _sum / _count per name."""
    import httpx

    sums: Dict[str, float] = {}
    for line in httpx.get(url).text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        for suffix in ("_sum", "_count"):
            if name.endswith(suffix):
                sums[name] = float(value)
    return {name[:-4]: sums[name] / max(sums.get(name[:-4] + "_count", 0.0), 1.0)
            for name in sums if name.endswith("_sum")}


def _post(client, url: str, body: dict, reasons, headers=None) -> None:
    answer = client.post(url, json=body, headers=headers)
    answer.raise_for_status()
    if "fallback_reason" in answer.text:  # the endpoint's (a direct call has none)
        reasons[answer.json()["fallback_reason"]] += 1


def _jwt_auth(folder: Path, users: List[str]):
    """The `auth` section of mode jwt (a JWKS file of an RSA key made now) and a token per
    user signed by it (issue 42, item 5: the endpoint verifies one per request)."""
    import json

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    (folder / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "bench",
                                                            "alg": "RS256"}]}))
    issuer, audience, now = "https://idp.bench/", "recommend-endpoint", int(time.time())
    tokens = {u: jwt.encode({"sub": u, "iss": issuer, "aud": audience, "iat": now,
                             "exp": now + 86400}, key, algorithm="RS256",
                            headers={"kid": "bench"}) for u in users}
    return {"mode": "jwt", "jwks_file": str(folder / "jwks.json"), "issuer": issuer,
            "audience": audience}, tokens


def _brownout(url: str, bodies: List[dict], tf_pid: int, args) -> None:
    """The closed loop against the endpoint with the TF Serving stand-in frozen (SIGSTOP):
    the first calls wait out tf_serving.timeout_ms, then the circuit opens and the fallback
    answers at once but for a probe every breaker_cooldown_s (issue 42, item 4)."""
    import signal

    reasons: Counter = Counter()
    os.kill(tf_pid, signal.SIGSTOP)
    try:
        latencies = _closed_loop(lambda c, b: _post(c, url, b, reasons), bodies,
                                 args.concurrency, args.seconds * args.rounds)
    finally:
        os.kill(tf_pid, signal.SIGCONT)
    print(f"\nTF Serving stand-in frozen (SIGSTOP), closed loop, {args.concurrency} clients, "
          f"{args.seconds * args.rounds:.0f} s")
    print(f"{'requests':>9} {'P50 ms':>8} {'P99 ms':>8} {'max ms':>8}  answers by fallback_reason")
    print(f"{len(latencies):>9} {statistics.median(latencies):>8.2f} "
          f"{_pct(latencies, 99):>8.2f} {max(latencies):>8.2f}  {dict(reasons)}")


def _log_outcomes(url: str) -> Dict[str, float]:
    """recommend_request_log_records_total by outcome, from an endpoint's /metrics."""
    import httpx

    out: Dict[str, float] = {}
    for line in httpx.get(url).text.splitlines():
        if line.startswith("recommend_request_log_records_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            out[outcome] = float(line.rsplit(" ", 1)[1])
    return out


def _pct(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=4.0, help="per round and arm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rates", default="50,100,150,200,250,300")
    parser.add_argument("--no-brownout", action="store_true",
                        help="skip the closed loop with the TF Serving stand-in frozen")
    args = parser.parse_args(argv)

    import random

    import yaml

    from core.click_history import ClickEvent
    from service.history_store import HistoryStore
    from service.config import load_service_config
    from devtools import kafka_node, redis_node
    from devtools.loopback import free_port, stop_process

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        ids = build_model(folder / "models" / "recommender", args.items, args.dim, args.k)
        print(f"model: {args.items} items, d={args.dim}, k={args.k} "
              f"({time.perf_counter() - started:.1f} s to build)", flush=True)
        _catalog(folder / "items.csv", ids)
        server = redis_node.start(folder / "redis")
        processes, kafka = [], None
        try:
            kafka = kafka_node.start(folder / "kafka")
            kafka_node.create_topic(kafka, "requests")
            config = yaml.safe_load((REPO / "configs" / "recommender_service.yaml").read_text())
            config["pipeline_config"] = str(REPO / "configs" / "recommender.yaml")
            config["model_base_path"] = str(folder / "models" / "recommender")
            config["catalog"]["path"] = str(folder / "items.csv")
            config["redis"]["url"] = server.url
            tf_url = f"http://127.0.0.1:{free_port()}"
            config["tf_serving"]["url"] = tf_url
            config["endpoint"]["port"] = free_port()
            config["endpoint"]["admin_port"] = free_port()
            # Off but in the endpoint+log arm (the repo's file logs 5 % to kafka.bootstrap_servers).
            config["request_log"]["enabled"] = False
            config["kafka"]["bootstrap_servers"] = kafka.bootstrap
            (folder / "service.yaml").write_text(yaml.safe_dump(config))
            service = load_service_config(folder / "service.yaml")
            rng = random.Random(5)
            store = HistoryStore.from_service_config(server.client(), service)
            histories = {}
            for u in range(USERS):
                user = f"bench-{u:04d}"
                clicks = rng.sample(ids, service.history_spec().length)
                for t, item in enumerate(clicks):
                    store.apply(ClickEvent(f"{user}-{t}", user, item, 1_000 + t))
                histories[user] = clicks
            with open(folder / "tf_serving.log", "wb") as log:
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", "devtools.tf_serving", "--model-base-path",
                     config["model_base_path"], "--model-name", service.model_name, "--port",
                     tf_url.rsplit(":", 1)[1], "--grpc-port", "0"], cwd=REPO, stdout=log))
            _wait(f"{tf_url}/v1/models/{service.model_name}", processes[-1])
            # Its gRPC address, printed once both its APIs listen (before REST answers).
            grpc_target = (folder / "tf_serving.log").read_text().split(" and gRPC ", 1)[1] \
                .split()[0]
            config["tf_serving"].update(protocol="grpc", grpc_target=grpc_target)
            (folder / "service.yaml").write_text(yaml.safe_dump(config))
            endpoint = f"http://127.0.0.1:{config['endpoint']['port']}"
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "service.endpoint", "--config",
                 str(folder / "service.yaml")], cwd=REPO, stdout=subprocess.DEVNULL))
            admin = f"http://127.0.0.1:{config['endpoint']['admin_port']}"
            _wait(f"{admin}/readyz", processes[-1])
            # The same endpoint calling TF Serving's REST API: a second process.
            rest_port, rest_admin = free_port(), free_port()
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "service.endpoint", "--config",
                 str(folder / "service.yaml"), "--tf-serving-protocol", "rest", "--port",
                 str(rest_port), "--admin-port", str(rest_admin)], cwd=REPO,
                stdout=subprocess.DEVNULL))
            _wait(f"http://127.0.0.1:{rest_admin}/readyz", processes[-1])
            recommend_rest = f"http://127.0.0.1:{rest_port}/v1/recommend"
            # The same endpoint logging every request (sample_rate 1.0) to Kafka, users hashed.
            log_port, log_admin = free_port(), free_port()
            logged = {**config, "request_log": {**config["request_log"], "enabled": True,
                                                "sample_rate": 1.0, "topic": "requests"}}
            (folder / "service_log.yaml").write_text(yaml.safe_dump(logged))
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "service.endpoint", "--config",
                 str(folder / "service_log.yaml"), "--port", str(log_port), "--admin-port",
                 str(log_admin)], cwd=REPO, stdout=subprocess.DEVNULL,
                env={**os.environ, "REQUEST_LOG_USER_HASH_KEY": "bench-key"}))
            _wait(f"http://127.0.0.1:{log_admin}/readyz", processes[-1])
            recommend_log = f"http://127.0.0.1:{log_port}/v1/recommend"
            users = sorted(histories)

            def bearer(body: dict) -> dict:
                return {"Authorization": f"Bearer {tokens[body['user_id']]}"}

            # The same endpoint with authentication on (auth.mode jwt): a second process.
            config["auth"], tokens = _jwt_auth(folder, users)
            config["endpoint"].update(port=free_port(), admin_port=free_port())
            (folder / "service_jwt.yaml").write_text(yaml.safe_dump(config))
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "service.endpoint", "--config",
                 str(folder / "service_jwt.yaml")], cwd=REPO, stdout=subprocess.DEVNULL))
            _wait(f"http://127.0.0.1:{config['endpoint']['admin_port']}/readyz", processes[-1])
            recommend_jwt = f"http://127.0.0.1:{config['endpoint']['port']}/v1/recommend"
            direct_bodies = [{"signature_name": "retrieve", "instances": [
                {"user_click_history": histories[u], "hour": 20.0, "device": "mobile"}]}
                for u in users]
            endpoint_bodies = [{"user_id": u, "k": args.k,
                                "context": {"hour": 20, "device": "mobile"}} for u in users]
            predict = f"{tf_url}/v1/models/{service.model_name}:predict"
            recommend = f"{endpoint}/v1/recommend"
            # The same answer both ways, before any timing; TF's first runs warmed up first (the
            # synthetic model has no warmup records, and its first calls pass the endpoint's
            # TF Serving budget: the fallback would answer).
            import httpx

            for n in range(20):
                httpx.post(predict, json=direct_bodies[n], timeout=60).raise_for_status()
            for n in range(20):
                got = httpx.post(recommend, json=endpoint_bodies[n]).json()
                want = httpx.post(predict, json=direct_bodies[n]).json()
                assert [i["item_id"] for i in got["items"]] == \
                    want["predictions"][0]["item_ids"], (got, want)
                rest = httpx.post(recommend_rest, json=endpoint_bodies[n]).json()
                assert [i["item_id"] for i in rest["items"]] == \
                    want["predictions"][0]["item_ids"], (rest, want)
                logged_answer = httpx.post(recommend_log, json=endpoint_bodies[n]).json()
                assert [i["item_id"] for i in logged_answer["items"]] == \
                    want["predictions"][0]["item_ids"], (logged_answer, want)
                got = httpx.post(recommend_jwt, json=endpoint_bodies[n],
                                 headers=bearer(endpoint_bodies[n])).json()
                assert got["history"] == "redis" and [i["item_id"] for i in got["items"]] == \
                    want["predictions"][0]["item_ids"], (got, want)
            results: Dict[str, List[float]] = {"direct": [], "endpoint": [], "endpoint+log": [],
                                               "endpoint-rest": [], "endpoint+jwt": []}
            reasons: Counter = Counter()  # the endpoint's answers by fallback_reason
            # CPU seconds of each server process during each arm: where the 2 cores go.
            tf_pid = processes[0].pid
            cpu = {arm: [0.0, 0.0] for arm in results}
            for _ in range(args.rounds):
                for arm, url, bodies, auth, endpoint_pid in (
                        ("direct", predict, direct_bodies, None, processes[1].pid),
                        ("endpoint", recommend, endpoint_bodies, None, processes[1].pid),
                        ("endpoint+log", recommend_log, endpoint_bodies, None,
                         processes[3].pid),
                        ("endpoint-rest", recommend_rest, endpoint_bodies, None,
                         processes[2].pid),
                        ("endpoint+jwt", recommend_jwt, endpoint_bodies, bearer,
                         processes[4].pid)):
                    before = (_cpu_s(tf_pid), _cpu_s(endpoint_pid))
                    results[arm] += _closed_loop(
                        lambda c, b, url=url, auth=auth: _post(c, url, b, reasons,
                                                               auth and auth(b)),
                        bodies, args.concurrency, args.seconds)
                    cpu[arm][0] += _cpu_s(tf_pid) - before[0]
                    cpu[arm][1] += _cpu_s(endpoint_pid) - before[1]
            print(f"\nclosed loop, {args.concurrency} clients, {args.rounds} rounds of "
                  f"{args.seconds:.0f} s each (load average {os.getloadavg()[0]:.1f})")
            print(f"{'path':<12} {'requests':>9} {'req/s':>7} {'P50 ms':>8} {'P99 ms':>8}")
            seconds = args.rounds * args.seconds
            for name, values in results.items():
                print(f"{name:<12} {len(values):>9} {len(values) / seconds:>7.0f} "
                      f"{statistics.median(values):>8.2f} {_pct(values, 99):>8.2f}")
            for arm, (tf_cpu, endpoint_cpu) in cpu.items():
                count = max(len(results[arm]), 1)
                print(f"CPU per request, {arm}: TF Serving stand-in {tf_cpu / count * 1000:.2f} "
                      f"ms, endpoint {endpoint_cpu / count * 1000:.2f} ms")
            for arm, port in (("endpoint", config["endpoint"]["admin_port"]),
                              ("endpoint-rest", rest_admin)):
                inside = _means(f"http://127.0.0.1:{port}/metrics")
                print(f"inside {arm} (its /metrics, means, every round and the checks): request "
                      f"{inside['recommend_request_duration_seconds'] * 1000:.2f} ms, of which "
                      f"the TF Serving call "
                      f"{inside['recommend_tf_serving_duration_seconds'] * 1000:.2f} ms")
            for arm in ("endpoint", "endpoint-rest"):
                ratio = _pct(results[arm], 99) / _pct(results["direct"], 99)
                print(f"{arm}/direct P99: {ratio:.2f}x (goal <= {GOAL_RATIO}x; objective "
                      f"P99 < {OBJECTIVE_MS:.0f} ms)")
            ratio = _pct(results["endpoint+log"], 99) / _pct(results["endpoint"], 99)
            print(f"endpoint+log/endpoint P99 (request log at sample_rate 1.0 against off): "
                  f"{ratio:.3f}x (goal <= {LOG_GOAL_RATIO}x); its records by outcome: "
                  f"{_log_outcomes(f'http://127.0.0.1:{log_admin}/metrics')}")
            print(f"endpoint answers by fallback_reason (None: the model's): {dict(reasons)}")
            print("\nopen loop against the endpoint (latency from each request's scheduled time)")
            print(f"{'req/s':>7} {'P50 ms':>8} {'P99 ms':>8} {'errors':>7}")
            best = None
            for rate in (float(r) for r in args.rates.split(",")):
                row = _open_loop(recommend, endpoint_bodies, rate, args.seconds)
                print(f"{rate:>7.0f} {row['p50']:>8.2f} {row['p99']:>8.2f} {row['errors']:>7}",
                      flush=True)
                if row["p99"] >= OBJECTIVE_MS or row["errors"]:
                    break
                best = rate
            print(f"highest rate tried with P99 < {OBJECTIVE_MS:.0f} ms: "
                  f"{best if best is not None else 'none'} req/s")
            if not args.no_brownout:
                _brownout(recommend, endpoint_bodies, tf_pid, args)
        finally:
            for process in processes:  # the stand-in, after its freeze, may need the kill
                stop_process(process, 30)
            redis_node.stop(server)
            if kafka is not None:
                kafka_node.stop(kafka)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
