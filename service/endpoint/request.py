"""The recommend request and answer, and their checks: every refusal is a 4xx
`{"error": ..., "field": "<dotted field>"}` naming the field, values quoted by service.ids.shown.

Checked in this order, nothing sent to Redis or TF Serving before all pass: the body's size
(endpoint.max_body_bytes, 413: the Content-Length and the bytes actually read, chunked bodies
too) and the time it takes to arrive (endpoint.body_timeout_s, 408), UTF-8 and JSON (400), the
fields' types, unknown fields (400), then user_id and every item id by service.ids.check_id, k
in 1..the model's k, each context value against its domain (endpoint.context_domains: a range,
or a list of values), and every request item id against the serving version's vocabulary (an
id `retrieve` cannot know is named in a 400).
"""
from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Dict, List, Literal, Optional, Type

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from starlette.requests import ClientDisconnect, Request

from service.ids import InvalidId, check_id, shown

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_]{1,64}$")


class Refused(Exception):
    """A request the endpoint refuses: HTTP status, message and the field it names."""

    def __init__(self, status: int, error: str, field: Optional[str] = None,
                 headers: Optional[Dict[str, str]] = None):
        super().__init__(error)
        self.status, self.error, self.field, self.headers = status, error, field, headers

    def body(self) -> dict:
        return {"error": self.error, "field": self.field}


class ErrorAnswer(BaseModel):
    """Every 4xx and 5xx answer of /v1/recommend."""
    error: str
    field: Optional[str] = Field(None, description="the refused field, dotted "
                                 "(exclude_item_ids.2, context.hour); `body` for the body as a "
                                 "whole (size, UTF-8, JSON); null for a server-side failure")


# Why an answer is the popularity fallback: the closed set of recommend_fallbacks_total's
# reason label and of the answer's fallback_reason.
FallbackReason = Literal["anonymous", "no_history", "redis_error", "tf_serving_timeout",
                         "tf_serving_refused", "tf_serving_error", "circuit_open"]


class Item(BaseModel):
    model_config = ConfigDict(extra="allow")
    item_id: str
    score: Optional[float] = Field(description="retrieve's score; null for the fallback")


class RecommendAnswer(BaseModel):
    items: List[Item] = Field(description="best first; k of them, fewer when exclude_seen or "
                              "exclude_item_ids dropped some of retrieve's k")
    model_version: str = Field(description="TF Serving's newest AVAILABLE version (the model "
                               "status API; a predict answer carries no version)")
    history: Literal["redis", "fallback"] = Field(
        description="redis: retrieve answered for the history (Redis's, merged with "
                    "recent_item_ids); fallback: the version's most frequent items (scores "
                    "null), for the reason in fallback_reason")
    fallback_reason: Optional[FallbackReason] = Field(
        None, description="null when retrieve answered; anonymous: no credentials sent, so no "
        "history is read (exclude_seen ignored); no_history: none stored or sent; "
        "redis_error: Redis down or over its budget; tf_serving_timeout, tf_serving_refused, "
        "tf_serving_error (a 5xx or a broken answer): TF Serving failed this call; "
        "circuit_open: TF Serving failed repeatedly and is not called for a while")
    # No history_length: with exclude_seen it told any caller whether an item is in a history
    # (issue 42, item 5).


def request_model(numeric: List[str], categorical: List[str], domains: dict,
                  user_required: bool = True) -> Type[BaseModel]:
    """RecommendRequest, its context holding the model's query features besides the history;
    raises ValueError unless `domains` (endpoint.context_domains) gives each exactly one of its
    kind. user_required False (auth on): user_id may be left out, the identity names the user."""
    check_domains(numeric, categorical, domains)
    strict = ConfigDict(extra="forbid", strict=True)
    fields: Dict[str, tuple] = {name: (Optional[float], Field(
        None, description=domain_text(domains[name]))) for name in numeric}
    fields.update({name: (Optional[str], Field(None, description=domain_text(domains[name])))
                   for name in categorical})
    context = create_model("Context", __config__=strict, **fields)
    return create_model(
        "RecommendRequest", __config__=strict,
        user_id=(str, Field(description="1-64 of A-Z a-z 0-9 _ . : -")) if user_required else
        (Optional[str], Field(None, description="optional: the authenticated user's; another "
                              "user's is a 403")),
        k=(int, Field(description="1..the model's k")),
        exclude_seen=(bool, Field(False, description="drop the history's items from the "
                                  "answer (it may then hold fewer than k)")),
        exclude_item_ids=(List[str], Field(default_factory=list)),
        recent_item_ids=(List[str], Field(default_factory=list, description=(
            "the session's clicks not yet in Redis, oldest first: merged after the stored "
            "history (an item once, at its newest position, the newest `length` kept)"))),
        context=(Optional[context], Field(None, description="absent features: NaN / \"\"")))


def check_domains(numeric: List[str], categorical: List[str], domains: dict) -> None:
    where = "endpoint.context_domains"
    unknown = sorted(set(domains) - set(numeric) - set(categorical))
    if unknown:
        raise ValueError(f"{where} names {unknown}, which are not context features of the model "
                         f"(numeric {numeric}, categorical {categorical})")
    for names, kind, example in ((numeric, "min", "{min: 0, max: 23, whole: true}"),
                                 (categorical, "values", "{values: [a, b]}")):
        for name in names:
            if name not in domains:
                raise ValueError(f"{where} has no domain for the context feature {name!r}: add "
                                 f"{name}: {example} (a value outside it is refused)")
            if not hasattr(domains[name], kind):
                raise ValueError(f"{where}.{name}: the feature is "
                                 f"{'numeric' if kind == 'min' else 'categorical'}, its domain "
                                 f"must be like {example}")


def domain_text(domain) -> str:
    if hasattr(domain, "values"):
        return "one of " + ", ".join(domain.values) + ' ("" or absent: unknown)'
    whole = ", whole numbers" if domain.whole else ""
    return f"{domain.min:g}..{domain.max:g}{whole} (absent: unknown)"


def field_name(loc) -> str:
    return ".".join(str(p) if isinstance(p, int) or _PLAIN_KEY.fullmatch(str(p))
                    else shown(p) for p in loc)


async def read_body(request: Request, max_bytes: int, timeout_s: float) -> bytes:
    """The body, refused (413) past max_bytes: by its Content-Length, then by what arrives; and
    refused (408) unless it has all arrived within timeout_s: uvicorn has no such deadline, and
    a client trickling its body would hold its connection and a concurrency slot for ever."""
    try:
        return await asyncio.wait_for(_read_body(request, max_bytes), timeout_s)
    except asyncio.TimeoutError:
        # Connection: close: the rest of the body may still be on its way.
        raise Refused(408, f"the body did not arrive whole within {timeout_s:g} s (endpoint."
                      "body_timeout_s): send it at once", "body",
                      {"Connection": "close"}) from None


async def _read_body(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise Refused(400, f"Content-Length {shown(declared)} is not a number", "body")
        if int(declared) > max_bytes:
            raise Refused(413, f"the body of {int(declared)} bytes is over the limit of "
                          f"{max_bytes} bytes", "body")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise Refused(413, f"the body is over the limit of {max_bytes} bytes", "body")
            chunks.append(chunk)
    except ClientDisconnect:
        raise Refused(400, "the client went away before the body ended", "body") from None
    return b"".join(chunks)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def parse(raw: bytes, model: Type[BaseModel]) -> BaseModel:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = shown(raw[e.start:e.start + 1])
        raise Refused(400, f"the body is not UTF-8: byte {e.start} is {bad}", "body") from None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except ValueError as e:
        raise Refused(400, f"the body is not JSON: {e}", "body") from None
    except RecursionError:
        raise Refused(400, "the body is not JSON the endpoint reads: nested too deep",
                      "body") from None
    if not isinstance(data, dict):
        raise Refused(400, f"the body must be a JSON object, not {type(data).__name__}",
                      "body")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        field = field_name(first["loc"])
        if first["type"] == "extra_forbidden":
            raise Refused(400, f"unknown field {field}", field) from None
        if first["type"] == "missing":
            raise Refused(400, f"{field} is required", field) from None
        raise Refused(400, f"{field} {shown(first.get('input'))}: {first['msg']}", field) \
            from None


def check(body: BaseModel, model_k: int, vocabulary, max_excluded: int, domains: dict) -> None:
    """The checks past the types (raises Refused naming the field)."""
    try:
        if body.user_id is not None:
            check_id("user_id", body.user_id)
        for name in ("exclude_item_ids", "recent_item_ids"):
            for index, item in enumerate(getattr(body, name)):
                check_id(f"{name}.{index}", item)
        if body.context is not None:
            for name, value in body.context:
                if isinstance(value, str) and value:
                    check_id(f"context.{name}", value)
    except InvalidId as e:
        raise Refused(400, str(e), e.field) from None
    if not 1 <= body.k <= model_k:
        raise Refused(400, f"k {shown(body.k)} must be in 1..{model_k} (the model's k)", "k")
    if len(body.exclude_item_ids) > max_excluded:
        raise Refused(400, f"exclude_item_ids holds {len(body.exclude_item_ids)} ids, at most "
                      f"{max_excluded} are allowed", "exclude_item_ids")
    if body.context is not None:
        for name, value in body.context:
            if isinstance(value, float) and not math.isfinite(value):
                raise Refused(400, f"context.{name} {shown(value)} is not a finite number",
                              f"context.{name}")
            if value is not None and value != "" and not in_domain(value, domains[name]):
                text = f"{value:g}" if isinstance(value, float) else shown(value)
                raise Refused(400, f"context.{name} {text} is outside its domain: "
                              f"{domain_text(domains[name])}", f"context.{name}")
    for name in ("exclude_item_ids", "recent_item_ids"):
        for index, item in enumerate(getattr(body, name)):
            if item not in vocabulary:
                raise Refused(400, f"{name}.{index} {shown(item)} is not an item of the "
                              "serving model", f"{name}.{index}")


def in_domain(value, domain) -> bool:
    if hasattr(domain, "values"):
        return value in domain.values
    return domain.min <= value <= domain.max and (not domain.whole or float(value).is_integer())
