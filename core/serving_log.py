"""What the served model was asked, one record per logged request (issue 45): the request log's
format, written by the recommend endpoint (Kafka topic `requests`) and the predict client (dated
files), read by the request sink, which writes the serving span the nightly skew check reads.

A record is JSON, schema 1:

    {"schema": 1, "time": "2026-12-04T07:30:00.123Z", "model_version": "1796172913",
     "source": "endpoint", "signature": "retrieve", "user": "9f2c...",   # user: only with a key
     "features": {"user_click_history": ["sku1", "sku2"], "hour": 23.0, "device": "desktop"}}

`features` are the signature's raw inputs as the client meant them: a list unpadded, an absent
number null, an absent category "". Never the user id in clear: `user` is a keyed hash
(HMAC-SHA256) when a key is configured, else absent; nothing else about the user is logged.

A serving span is the click log's layout without the label: CSV files under
`<serving_base>/span-YYYYMMDD/`, one column per signature input, so the pipeline's own reader
types them as it types the training data (lists joined by data.list_separator, absent cells
the first null marker).
"""
from __future__ import annotations

import csv
import datetime
import hashlib
import hmac
import io
import json
import math
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence

SCHEMA = 1
SOURCES = ("endpoint", "predict")
KEYS = {"schema", "time", "model_version", "source", "signature", "user", "features"}


class BadRecord(ValueError):
    """A request-log record that is not schema 1: the message says what is wrong."""


def user_key(user_id: Optional[str], key: Optional[bytes]) -> Optional[str]:
    """The user as the log may name them: HMAC-SHA256 of the id under the key, hex; None without
    a key or a user (the user is then not logged at all)."""
    if user_id is None or not key:
        return None
    return hmac.new(key, user_id.encode(), hashlib.sha256).hexdigest()


def signature_inputs(config, signature: str) -> List[str]:
    """The raw inputs a signature takes, in the model's order: every model input, less the
    retrieval candidate for `retrieve` (models/features.py FeatureSpec.query_inputs)."""
    inputs = list(config.features.model_inputs)
    if signature == "retrieve":
        if config.retrieval is None:
            raise ValueError("a `retrieve` request log needs a config with `retrieval:`")
        inputs.remove(config.retrieval.candidate)
    return inputs


def make_record(features: Dict, model_version: Optional[str], source: str, signature: str,
                user: Optional[str] = None,
                now: Optional[datetime.datetime] = None) -> bytes:
    if source not in SOURCES:
        raise ValueError(f"source {source!r} is not one of {SOURCES}")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    record = {"schema": SCHEMA,
              "time": now.astimezone(datetime.timezone.utc).isoformat(
                  timespec="milliseconds").replace("+00:00", "Z"),
              "model_version": model_version, "source": source, "signature": signature,
              "features": {name: (None if isinstance(v, float) and math.isnan(v) else v)
                           for name, v in features.items()}}
    if user is not None:
        record["user"] = user
    return json.dumps(record, separators=(",", ":"), allow_nan=False).encode()


def read_record(raw: bytes) -> Dict:
    """The record, checked; BadRecord names what is wrong (the sink counts and skips those)."""
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRecord(f"not JSON: {e}") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise BadRecord(f"not a schema {SCHEMA} record")
    unknown = set(record) - KEYS
    if unknown:
        raise BadRecord(f"unknown keys {sorted(unknown)}")
    if not isinstance(record.get("features"), dict):
        raise BadRecord("features is not an object")
    try:
        record["time"] = datetime.datetime.fromisoformat(
            str(record.get("time")).replace("Z", "+00:00"))
    except ValueError:
        raise BadRecord(f"time {record.get('time')!r} is not ISO 8601") from None
    if record["time"].tzinfo is None:
        raise BadRecord("time has no time zone")
    return record


def span_folder(time: datetime.datetime) -> str:
    """The dated span a record belongs to (UTC day), as the click log's file_pattern names
    spans: span-YYYYMMDD."""
    return "span-" + time.astimezone(datetime.timezone.utc).strftime("%Y%m%d")


def cell_text(value) -> str:
    """A value as a span's cell: a float in full (repr: the shortest text that reads back as
    the same double, so float32 inputs keep every digit; `:g` kept six: 1234567.0 was
    1.23457e+06), anything else as str."""
    return repr(value) if isinstance(value, float) else str(value)


def span_rows(records: Sequence[Dict], columns: Sequence[str], list_columns: Sequence[str],
              list_separator: str, null_marker: str) -> str:
    """The records as one CSV file of a serving span: a header of `columns`, a row per record;
    a feature the record lacks (or null, or "") is the null marker."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        features = record["features"]
        row = []
        for name in columns:
            value = features.get(name)
            if name in list_columns:
                value = list_separator.join(str(v) for v in value or [] if v != "")
                row.append(value)
            elif value is None or value == "":
                row.append(null_marker)
            else:
                row.append(cell_text(value))
        writer.writerow(row)
    return out.getvalue()


def write_span_file(serving_base, span: str, name: str, text: str):
    """Writes one file of a serving span durably, whole or not at all: to a temporary name the
    span's `*.csv` pattern does not match, flushed to disk (fsync), then renamed over `name`
    (a file of that name is replaced, never appended to) and the folder's entry synced. A
    reader never sees half a file, and a crash leaves at most a `.tmp` file behind. Returns
    the file's path. An `s3://bucket/prefix` base: write_span_object (its URI returned)."""
    if str(serving_base).startswith("s3://"):
        return write_span_object(str(serving_base), span, name, text)
    folder = Path(serving_base) / span
    folder.mkdir(parents=True, exist_ok=True)
    path, temporary = folder / name, folder / f".{name}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8", newline="") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)  # the rename itself survives a power cut
    finally:
        os.close(descriptor)
    return path


def write_span_object(serving_base: str, span: str, name: str, text: str) -> str:
    """Writes one file of a serving span to an object store (`s3://bucket/prefix`: S3, MinIO,
    SeaweedFS) as one PutObject of the whole file: an object appears whole or not at all, as
    the local rename does, and a PutObject of the same key replaces it (a replay overwrites).
    The connection is boto3's own from the environment: AWS_ENDPOINT_URL (MinIO, SeaweedFS),
    AWS_REGION or AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_CA_BUNDLE.
    Any failure (refused, unreachable, no bucket) is an OSError, which the sink retries without
    committing, as it retries a full disk. Returns the object's URI."""
    bucket, _, prefix = serving_base[len("s3://"):].partition("/")
    if not bucket:
        raise ValueError(f"serving_base {serving_base!r} names no bucket (s3://bucket/prefix)")
    key = "/".join(part for part in (prefix.strip("/"), span, name) if part)
    uri = f"s3://{bucket}/{key}"
    client = _s3_client()
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client.put_object(Bucket=bucket, Key=key, Body=text.encode("utf-8"),
                          ContentType="text/csv")
    except (BotoCoreError, ClientError) as e:  # not OSErrors: the sink retries those
        raise OSError(f"PutObject {uri}: {e}") from e
    return uri


_S3_CLIENTS: Dict[int, object] = {}


def _s3_client():
    """One boto3 client per process (clients are thread-safe; a forked child makes its own).
    boto3 is imported here only: the endpoint and the predict client never need it."""
    client = _S3_CLIENTS.get(os.getpid())
    if client is None:
        import boto3
        import botocore.config

        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        client = boto3.client("s3", region_name=region, config=botocore.config.Config(
            connect_timeout=10, read_timeout=60, retries={"mode": "standard"}))
        _S3_CLIENTS.clear()
        _S3_CLIENTS[os.getpid()] = client
    return client
