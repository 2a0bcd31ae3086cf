"""`make service-burst`: a scripted burst of recommend requests to the running endpoint (`make
service-up`), for the nightly skew check to measure (issue 45, item 4).

    python -m devtools.request_burst [--config configs/recommender_service.yaml] [--requests N]
        [--shift hour=3] [--history-cut 1] [--seed 7] [--wait-s S]

Each request is a row of the click log's newest span, drawn at random: its history as
recent_item_ids (for a new user, so Redis adds nothing), its context (the pipeline config's
numeric and categorical model inputs) as sent; unshifted, the traffic looks like training.
--shift NAME=VALUE sets a context feature on every request (a value outside
endpoint.context_domains is refused by the endpoint with 400 and never logged); --history-cut N
keeps each history's newest N items. Rows with an empty history are skipped (the endpoint answers
them from its fallback, without the model).

It prints what it sent and the answers' statuses, then waits (up to --wait-s, default the sink's
flush_s plus 30) until the request sink has written every request the endpoint logged (its
recommend_request_log_records_total{outcome="sent"} counter) as rows of today's serving span, and
says where. --requests defaults to what gives skew.min_rows logged rows twice over at
request_log.sample_rate. Exit 0 when every request was answered 200, 1 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import csv
import datetime
import json
import math
import random
import re
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Dict, List, Tuple

from devtools.loopback import REPO

CONFIG = REPO / "configs" / "recommender_service.yaml"
SENT = 'recommend_request_log_records_total{outcome="sent"}'
SPAN_PARTS = {"{SPAN}": r"(\d+)", "{YYYY}": r"(\d{4})", "{MM}": r"(\d{2})", "{DD}": r"(\d{2})"}


def newest_span(input_base: Path, file_pattern: str) -> List[Path]:
    """The files of the newest span under input_base (the data section's file_pattern)."""
    glob, regex = file_pattern, re.escape(file_pattern)
    for spec, group in SPAN_PARTS.items():
        glob, regex = glob.replace(spec, "*"), regex.replace(re.escape(spec), group)
    glob, regex = re.sub(r"\*+", "*", glob), regex.replace(r"\*", "[^/]*")
    spans: Dict[Tuple[int, ...], List[Path]] = {}
    for path in input_base.glob(glob):
        match = re.fullmatch(regex, path.relative_to(input_base).as_posix())
        if match:
            spans.setdefault(tuple(int(g) for g in match.groups()), []).append(path)
    if not spans:
        raise SystemExit(f"no span matching {file_pattern} under {input_base}")
    return sorted(spans[max(spans)])


def requests_from(pipeline, args, rng: random.Random) -> List[dict]:
    """The request bodies: rows of the newest span, shifted as asked."""
    data, features = pipeline.data, pipeline.features
    [history] = list(features.lists)
    context_names = list(features.numeric) + list(features.categorical)
    rows = []
    for path in newest_span(Path(data.input_base), data.file_pattern):
        with open(path, newline="") as f:
            rows.extend(csv.DictReader(f))
    nulls = set(data.null_markers) | {""}
    shifts = dict(args.shift)
    run = uuid.uuid4().hex[:8]
    bodies = []
    while len(bodies) < args.requests:
        row = rng.choice(rows)
        items = [i for i in row[history].split(data.list_separator) if i]
        if not items:
            continue
        if args.history_cut is not None:
            items = items[-args.history_cut:]
        context = {name: (float(row[name]) if name in features.numeric else row[name])
                   for name in context_names if row[name] not in nulls}
        for name, value in shifts.items():
            context[name] = float(value) if name in features.numeric else value
        context = {name: (int(v) if isinstance(v, float) and v.is_integer() else v)
                   for name, v in context.items()}
        bodies.append({"user_id": f"burst-{run}-{len(bodies)}", "k": 5,
                       "recent_item_ids": items, "context": context})
    return bodies


def post(url: str, body: dict) -> Tuple[int, str]:
    request = urllib.request.Request(url, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, ""
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")[:300]
    except OSError as error:
        return 0, f"{type(error).__name__}: {error}"


def logged(admin: str) -> float:
    """The endpoint's count of request-log records delivered to Kafka."""
    with urllib.request.urlopen(f"{admin}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(SENT))


def settled(admin: str, before: float, quiet_s: float = 1.0, limit_s: float = 30) -> int:
    """Records delivered since `before`, once the counter has stopped moving (delivery reports
    arrive after the answers)."""
    deadline, last, since = time.monotonic() + limit_s, logged(admin), time.monotonic()
    while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
        time.sleep(0.2)
        now = logged(admin)
        if now != last:
            last, since = now, time.monotonic()
    return int(last - before)


def span_rows(folder: Path) -> int:
    return sum(max(0, len(p.read_text().splitlines()) - 1) for p in folder.glob("*.csv"))


def main(argv=None) -> int:
    from service.config import load_service_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=CONFIG, help="the service config")
    parser.add_argument("--requests", type=int, help="how many (default: skew.min_rows x 2 / "
                        "request_log.sample_rate)")
    parser.add_argument("--shift", action="append", default=[], metavar="NAME=VALUE",
                        type=lambda s: tuple(s.split("=", 1)) if "=" in s else
                        parser.error(f"--shift {s}: NAME=VALUE"),
                        help="a context feature's value on every request")
    parser.add_argument("--history-cut", type=int, help="keep each history's newest N items")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=8, help="requests in flight")
    parser.add_argument("--wait-s", type=float, help="how long to wait for the request sink")
    args = parser.parse_args(argv)
    service = load_service_config(args.config)
    pipeline = service.pipeline
    context = set(pipeline.features.numeric) | set(pipeline.features.categorical)
    unknown = sorted({name for name, _ in args.shift} - context)
    if unknown:
        parser.error(f"--shift {unknown}: not context features ({sorted(context)})")
    rate = service.request_log.sample_rate if service.request_log.enabled else 0.0
    if args.requests is None:
        args.requests = math.ceil(2 * pipeline.skew.min_rows / rate) if rate else 100
    bodies = requests_from(pipeline, args, random.Random(args.seed))
    endpoint = service.endpoint
    url = f"http://{endpoint.host}:{endpoint.port}/v1/recommend"
    admin = f"http://{endpoint.host}:{endpoint.admin_port}"
    base = service.request_sink.serving_base_path(pipeline)
    today = base / ("span-" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d"))
    try:
        before = logged(admin)
    except OSError as error:  # nothing listens: make service-up was not run, or it stopped
        print(f"error: the recommend endpoint's admin port {admin} does not answer ({error}): "
              "start the service with `make service-up` (`make service-status` shows what "
              "runs)", file=sys.stderr)
        return 2
    start = span_rows(today) if today.is_dir() else 0
    print(f"sending {len(bodies)} requests to {url}: rows of the click log's newest span"
          + (f", shifted {dict(args.shift)}" if args.shift else "")
          + (f", histories cut to {args.history_cut}" if args.history_cut is not None else ""),
          flush=True)
    with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        answers = list(pool.map(lambda body: post(url, body), bodies))
    statuses = collections.Counter(status for status, _ in answers)
    print("answers: " + ", ".join(f"{n} x {s}" for s, n in sorted(statuses.items())))
    for status, text in {s: t for s, t in answers if s != 200}.items():
        print(f"  {status}: {text}")
    sent = settled(admin, before)
    print(f"logged {sent} of them (request_log.sample_rate {rate:g})", flush=True)
    if sent:
        wait_s = args.wait_s if args.wait_s is not None else service.request_sink.flush_s + 30
        deadline, rows = time.monotonic() + wait_s, 0
        # The sink writes every flush_s (or flush_records).
        while time.monotonic() < deadline:
            rows = span_rows(today) if today.is_dir() else 0
            if rows - start >= sent:
                break
            time.sleep(0.5)
        print(f"the request sink's serving span {today}: {rows} rows"
              + ("" if rows - start >= sent else
                 f" (not every logged request yet after {wait_s:g} s: is the sink running?)"))
        print(f"the skew check reads the newest span with at least {pipeline.skew.min_rows} rows")
    return 0 if statuses == {200: len(bodies)} else 1


if __name__ == "__main__":
    sys.exit(main())
