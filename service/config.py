"""The recommender service's settings (configs/recommender_service.yaml), TF-free.

Kept apart from the pipeline config (core/config/): nothing online changes what the pipeline
trains or caches, and the pipeline config stays the one source of what the service serves: the
history's definition (features.lists.user_click_history, data.list_separator) and the model's
name and serving folder (serving.model_name, serving.serving_dir), which this file points at
(`pipeline_config`) instead of repeating.

    service = load_service_config("configs/recommender_service.yaml")
    service.history_spec()            # HistorySpec(length=10, keep='last', separator='|')
    service.history.ttl_s             # 2592000
    service.model_base_path()         # .../outputs/recommender/serving/recommender
"""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Annotated, Dict, List, Literal, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from core.click_history import HistorySpec
from core.config import ConfigError, PipelineConfig, load_config, read_mapping
from service.logins import (PATH_KEYS, Login, SaslLogin, TLSFiles, check_kafka,
                                 check_redis)

# A user or item id from outside (events, requests): letters, digits and _ . : - only, up to 64
# characters, starting with a letter or digit. What it keeps out: path parts (`../`), glob and
# Redis pattern characters (`*`, `?`, `[`), CR/LF and every Redis protocol fragment (`\r\n*3`,
# `$`), the list separator, spaces, quotes and anything not ASCII.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HistorySettings(_Section):
    ttl_s: int = Field(30 * 86400, ge=1)
    key_prefix: str = Field("history:", min_length=1)


class RedisSettings(_Section):
    url: str = Field("redis://127.0.0.1:6379/0", pattern=r"^rediss?://")
    # The endpoint's budget for reading a history; past it, the popularity fallback answers.
    timeout_ms: int = Field(20, ge=1, le=10000)
    # ACL users (service/logins.py; deploy/service/redis-users.acl): the endpoint's may only
    # read histories, the updater's write them. None: Redis's default user (development).
    endpoint_user: Optional[Login] = None
    updater_user: Optional[Login] = None
    # With a rediss:// URL: the CA to verify the server by, a client certificate.
    tls: Optional[TLSFiles] = None

    @model_validator(mode="after")
    def _access(self):
        check_redis(self.url, self.tls)
        return self


class KafkaSettings(_Section):
    bootstrap_servers: str = Field("127.0.0.1:9092", min_length=1)
    topic: str = Field("clicks", pattern=r"^[A-Za-z0-9._-]{1,249}$")
    dead_letter_topic: str = Field("clicks.dead-letter", pattern=r"^[A-Za-z0-9._-]{1,249}$")
    group_id: str = Field("history-updater", min_length=1)
    # An event larger than this is dead-lettered unread (a click event is ~150 bytes).
    max_event_bytes: int = Field(4096, ge=256)
    # PLAINTEXT (a broker on loopback only), SSL, or SASL_SSL: a SCRAM login over TLS
    # (service/logins.py); the updater's login and the CA that signed the brokers' certs.
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_SSL"] = "PLAINTEXT"
    sasl: Optional[SaslLogin] = None
    tls: Optional[TLSFiles] = None

    @model_validator(mode="after")
    def _access(self):
        check_kafka(self.security_protocol, self.sasl, self.tls)
        return self


class TFServingSettings(_Section):
    url: str = Field("http://127.0.0.1:8501", pattern=r"^https?://[^/?#]+$")
    # How the endpoint calls `retrieve` and reads the model status: REST at `url`, or gRPC at
    # `grpc_target` (host:port, TF Serving's 8500; service/endpoint/tf_serving_grpc.py): gRPC
    # by default (protobuf instead of JSON on both sides: bench/service_latency.py).
    protocol: Literal["grpc", "rest"] = "grpc"
    grpc_target: str = Field("127.0.0.1:8500", pattern=r"^[^/?#:\s]+:[0-9]{1,5}$")
    # A retrieve call's budget, one retry on a refused connection included; past it the
    # endpoint answers the popularity fallback. With redis.timeout_ms it must stay under
    # endpoint.p99_objective_ms, checked at load; TF Serving's own P99 is ~25 ms
    # (bench/README.md, service_latency).
    timeout_ms: int = Field(60, ge=1, le=60000)
    # The circuit breaker (service/endpoint/breaker.py): this many consecutive failed calls
    # (timeout, refused, 5xx, a broken answer) open it; open, no call is made (the fallback
    # answers) until, after breaker_cooldown_s, one probe call closes it again or not.
    breaker_failures: int = Field(5, ge=1, le=1000)
    breaker_cooldown_s: float = Field(5.0, gt=0, le=600)
    # How often the endpoint asks TF Serving which version is AVAILABLE (and reloads that
    # version's items when it changed).
    refresh_s: float = Field(10.0, gt=0)


class CatalogSettings(_Section):
    # A CSV of the items, one row per item id (its first column); what answers carry.
    path: Path
    # The columns an answer carries besides item_id and score, an allowlist: a column added to
    # the file later is not published until it is named here. Each must be a column.
    public_fields: List[str] = []
    # Columns that never leave the service: refused in public_fields (a start-up error), so a
    # sensitive column cannot be published by a slip in the allowlist. Each must be a column.
    sensitive_fields: List[str] = []

    @model_validator(mode="after")
    def _not_both(self):
        both = [name for name in self.public_fields if name in self.sensitive_fields]
        if both:
            raise ValueError(f"catalog.public_fields names {both}, which catalog."
                             "sensitive_fields refuses to publish: take them out of "
                             "public_fields")
        return self


class NumberDomain(_Section):
    """A numeric context feature's values: min..max, whole numbers only when `whole`."""
    min: float
    max: float
    whole: bool = False

    @model_validator(mode="after")
    def _ordered(self):
        if self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")
        return self


class ValuesDomain(_Section):
    """A categorical context feature's values ("" is always allowed: the feature absent)."""
    values: List[str] = Field(min_length=1)


class EndpointSettings(_Section):
    host: str = "127.0.0.1"
    # /v1/recommend only; everything else there is a 404.
    port: int = Field(8080, ge=1, le=65535)
    # /healthz, /readyz, /metrics, /docs, /openapi.json (service/endpoint/admin.py): the probes
    # and Prometheus only, never clients (what they tell is internal).
    admin_port: int = Field(8081, ge=1, le=65535)
    # A request body larger than this is refused (413) before it is parsed.
    max_body_bytes: int = Field(4096, ge=256)
    # exclude_item_ids: at most this many per request.
    max_excluded: int = Field(100, ge=0)
    # The endpoint's latency objective (P99, ms), the one the canary analysis holds TF Serving
    # to (the pipeline config's serving.canary.p99_slo_ms): redis.timeout_ms plus
    # tf_serving.timeout_ms must stay under it (load_service_config refuses the file).
    p99_objective_ms: float = Field(100.0, gt=0)
    # Slow clients (uvicorn times neither; service/endpoint/protocol.py and request.py do):
    # headers not arrived within head_timeout_s of the connection (or of a later request's
    # first byte), or a body not within body_timeout_s, are a 408; an idle kept-alive
    # connection is closed after keep_alive_timeout_s; past limit_concurrency connections plus
    # requests in flight, uvicorn answers 503 at once (deploy/service/README.md: Slow clients).
    head_timeout_s: float = Field(5.0, gt=0, le=60)
    body_timeout_s: float = Field(2.0, gt=0, le=60)
    keep_alive_timeout_s: float = Field(5.0, gt=0, le=300)
    limit_concurrency: int = Field(256, ge=2)
    # The domain of each context feature (the pipeline config's features.numeric and
    # .categorical besides the history): a value outside it is refused (400), a feature with
    # none stops the endpoint's start. The bundled data's (tests check them against it).
    context_domains: Dict[str, Union[NumberDomain, ValuesDomain]] = {}

    @model_validator(mode="after")
    def _ports_apart(self):
        if self.admin_port == self.port:
            raise ValueError(f"admin_port {self.admin_port} is the public port: the admin "
                             "endpoints need a port of their own")
        return self


class UpdaterSettings(_Section):
    # The updater's /metrics port (Prometheus scrapes it).
    metrics_port: int = Field(9108, ge=1, le=65535)
    # An event dated later than the updater's clock plus this is dead-lettered (kind time): a
    # click from the future would outrank every real one after it (service/events.py). The
    # room is for producers' clocks, which NTP keeps within seconds; a day at most.
    max_clock_skew_s: int = Field(300, ge=0, le=86400)


class RequestLogSettings(_Section):
    """The endpoint's request log (service/request_log.py, issue 45 item 1): a sampled share of
    the `retrieve` requests it sends TF Serving, as core/serving_log.py records, to a Kafka
    topic of the `kafka` section's brokers (its bootstrap servers, protocol and TLS)."""
    enabled: bool = True
    topic: str = Field("requests", pattern=r"^[A-Za-z0-9._-]{1,249}$")
    # The share of requests logged, drawn per request: 0 logs nothing, 1 every request.
    sample_rate: float = Field(0.05, ge=0.0, le=1.0)
    # The HMAC key the user id is hashed under (core/serving_log.user_key): an environment
    # variable's name, or a file (a mounted Secret), not both. Unset, empty or unreadable: no
    # record names its user (a warning at start), the rest is logged.
    user_hash_key_env: Optional[str] = Field("REQUEST_LOG_USER_HASH_KEY",
                                             pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    user_hash_key_file: Optional[Path] = None
    # Records waiting in the producer's memory (librdkafka's queue.buffering.max.messages): past
    # it a record is dropped, never waited for; one not delivered within delivery_timeout_ms
    # (a broker slow or away) is dropped too. Both counted (recommend_request_log_records_total).
    max_queued: int = Field(10000, ge=1, le=1_000_000)
    delivery_timeout_ms: int = Field(5000, ge=100, le=300_000)
    # How long a stop waits for the queued records.
    flush_timeout_s: float = Field(2.0, ge=0, le=30)
    # The endpoint's own Kafka login (SASL_SSL: a user that may only write `topic`); the
    # kafka section's sasl is the updater's.
    sasl: Optional[SaslLogin] = None

    @model_validator(mode="after")
    def _one_key_source(self):
        if self.user_hash_key_file is not None and self.user_hash_key_env is not None:
            raise ValueError("set one of user_hash_key_env and user_hash_key_file (null the "
                             "other)")
        return self


class RequestSinkSettings(_Section):
    """The request sink (service/request_sink.py, issue 45 item 2): a consumer group that writes
    the `requests` topic's records as the dated serving span the nightly skew check reads."""
    # Where span-YYYYMMDD/ folders of CSV files go (relative: to this file's folder), or an
    # object store's s3://bucket/prefix (a cluster: the Kubeflow pipeline root's `requests`;
    # core/serving_log.write_span_object). Unset: <the pipeline config's
    # runner.output_dir>/requests, where the skew check looks by default.
    serving_base: Optional[Union[Annotated[str, Field(pattern=r"^s3://[^/]+(/.*)?$")],
                                 Path]] = None
    topic: str = Field("requests", pattern=r"^[A-Za-z0-9._-]{1,249}$")
    group_id: str = Field("request-sink", min_length=1)
    # A file is written, and the offsets committed, every flush_records records or flush_s
    # seconds, whichever comes first: a crash replays at most that much, into the same files.
    flush_records: int = Field(5000, ge=1, le=1_000_000)
    flush_s: float = Field(60.0, gt=0, le=3600)
    # The sink's /metrics port (Prometheus scrapes it).
    metrics_port: int = Field(9110, ge=1, le=65535)
    # A record dated later than the sink's clock plus this is counted bad, not written: it
    # would open a span of a day to come.
    max_clock_skew_s: int = Field(300, ge=0, le=86400)
    # The sink's own Kafka login (SASL_SSL: a user that may read `topic` and commit `group_id`);
    # the kafka section's sasl is the updater's.
    sasl: Optional[SaslLogin] = None

    @field_validator("serving_base", mode="before")
    @classmethod
    def _s3_or_a_folder(cls, value):
        # gs://... would otherwise pass as a relative folder named "gs:".
        if isinstance(value, str) and "://" in value and \
                not re.fullmatch(r"s3://[^/]+(/.*)?", value):
            raise ValueError("a folder or an s3://bucket/prefix URI (the sink writes no "
                             f"other store): {value}")
        return value

    def serving_base_path(self, pipeline: PipelineConfig) -> Union[str, Path]:
        if self.serving_base is not None:
            return self.serving_base
        return Path(pipeline.runner.output_dir) / "requests"


class AuthSettings(_Section):
    """Who a request is (service/endpoint/auth.py, issue 42 item 5). No default mode: a file
    without `auth` is refused, so no deployment is open by omission; `none` (the body's user_id,
    unauthenticated) is for local development only."""
    mode: Literal["jwt", "gateway", "none"]
    # jwt: the signing keys, a JWKS file (read at start) or URL (fetched, cached jwks_cache_s).
    jwks_file: Optional[Path] = None
    jwks_url: Optional[str] = Field(None, pattern=r"^https?://")
    jwks_cache_s: float = Field(300.0, gt=0)
    jwks_timeout_s: float = Field(2.0, gt=0, le=30)
    issuer: Optional[str] = None
    audience: Optional[str] = None
    # Asymmetric only: none and HS* (a public key used as an HMAC secret) are refused at load.
    algorithms: List[Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256",
                             "ES384", "ES512", "EdDSA"]] = Field(["RS256", "ES256"],
                                                                min_length=1)
    # exp and nbf: this much clock skew between the issuer and the endpoint is tolerated.
    leeway_s: float = Field(30.0, ge=0, le=300)
    # The claim holding the user id (checked as every outside id, ID_PATTERN).
    user_claim: str = Field("sub", min_length=1)
    # gateway: the header the gateway sets (and strips from what clients send).
    gateway_header: str = Field("X-Authenticated-User", pattern=r"^[A-Za-z0-9-]{1,64}$")

    @model_validator(mode="after")
    def _complete(self):
        if self.mode == "jwt":
            if (self.jwks_file is None) == (self.jwks_url is None):
                raise ValueError("mode jwt needs exactly one of jwks_file and jwks_url")
            if not self.issuer or not self.audience:
                raise ValueError("mode jwt needs issuer and audience (tokens for another "
                                 "service or from another issuer are refused)")
        return self


class ServiceConfig(_Section):
    pipeline_config: Path
    history: HistorySettings = HistorySettings()
    redis: RedisSettings = RedisSettings()
    kafka: KafkaSettings = KafkaSettings()
    tf_serving: TFServingSettings = TFServingSettings()
    catalog: CatalogSettings
    endpoint: EndpointSettings = EndpointSettings()
    updater: UpdaterSettings = UpdaterSettings()
    request_log: RequestLogSettings = RequestLogSettings()
    request_sink: RequestSinkSettings = RequestSinkSettings()
    auth: AuthSettings
    # The pushed model's versions (<serving_dir>/<model_name>); default: the pipeline config's.
    model_base_path: Optional[Path] = None

    @model_validator(mode="after")
    def _request_log_login(self):
        """Its login never in the clear. (A SASL_SSL cluster without one is refused when the
        endpoint starts, service/request_log.py: the other processes of this file need none.)"""
        if self.request_log.sasl is not None:
            try:
                check_kafka(self.kafka.security_protocol, self.request_log.sasl, self.kafka.tls)
            except ValueError as e:
                raise ValueError(f"request_log: {e}".replace("kafka.sasl", "request_log.sasl")
                                 ) from None
        return self

    @functools.cached_property
    def pipeline(self) -> PipelineConfig:
        return load_config(self.pipeline_config)

    def history_spec(self) -> HistorySpec:
        return HistorySpec.from_config(self.pipeline)

    @property
    def model_name(self) -> str:
        return self.pipeline.serving.model_name

    def model_versions_path(self) -> Path:
        if self.model_base_path is not None:
            return self.model_base_path
        return Path(self.pipeline.serving.serving_dir) / self.model_name


def load_service_config(path: Path | str) -> ServiceConfig:
    """Reads and validates the file; raises ConfigError naming the file and the key."""
    path = Path(path).resolve()
    raw = read_mapping(path, "service config")
    for dotted in ("pipeline_config", "catalog.path", "model_base_path", "auth.jwks_file",
                   "request_log.user_hash_key_file", "request_log.sasl.password_file",
                   "request_sink.serving_base", "request_sink.sasl.password_file",
                   *PATH_KEYS):
        *parents, key = dotted.split(".")
        section = raw
        for parent in parents:
            section = section.get(parent) if isinstance(section, dict) else None
        if isinstance(section, dict) and isinstance(section.get(key), str) and \
                "://" not in section[key]:  # a URI (s3://...) is no file of this machine
            section[key] = str((path.parent / section[key]).resolve())
    try:
        service = ServiceConfig.model_validate(raw)
    except ValidationError as e:
        lines = [f"invalid service config {path}:"]
        for item in e.errors():
            key = ".".join(str(p) for p in item["loc"]) or "(top level)"
            message = ("unknown key (misspelt, or not supported here)"
                       if item["type"] == "extra_forbidden" else item["msg"])
            lines.append(f"  {key}: {message}")
        raise ConfigError("\n".join(lines)) from None
    _check_latency_budget(service, path)
    return service


def _check_latency_budget(service: ServiceConfig, path: Path) -> None:
    """Past its budgets (Redis's read, TF Serving's call) the endpoint answers the fallback, so
    their sum bounds its P99 but for its own few ms: it must be under the objective. (Only
    files: tests that build a ServiceConfig in code may give a loaded machine more room.)"""
    objective = service.endpoint.p99_objective_ms
    spent = service.redis.timeout_ms + service.tf_serving.timeout_ms
    if spent >= objective:
        raise ConfigError(
            f"invalid service config {path}:\n  tf_serving.timeout_ms: "
            f"{service.tf_serving.timeout_ms} ms plus redis.timeout_ms "
            f"{service.redis.timeout_ms} ms is {spent} ms, not under "
            f"endpoint.p99_objective_ms ({objective:g} ms): lower them, leaving the endpoint a "
            "few ms of its own")
