"""What an error tells a client, and what the log keeps (issue 42, item 7).

Every answer of the endpoint carries X-Request-ID: the caller's own when it is a sane token (a
gateway's or a client's id, so that their logs and the endpoint's join), else one made here. An
error body is `{"error", "field", "request_id"}`; for a server-side failure (5xx) `error` is a
short reason code and nothing more: TF Serving's URL, pod addresses, upstream error text and
model-volume paths go to the log line, which names the same request id.
"""
from __future__ import annotations

import contextvars
import re
import uuid
from typing import Optional

from pydantic import Field

from service.endpoint import request as req

HEADER = b"x-request-id"
# A caller's id is kept when it is 1-128 of these (a UUID, a gateway's trace id); anything else
# (spaces, CR/LF, quotes, non-ASCII: log and header injection) is replaced by a fresh id.
_SANE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_current: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


def current() -> str:
    """The request id of the request being answered ("-" outside one)."""
    return _current.get()


def sane(value: Optional[bytes]) -> Optional[str]:
    """The caller's X-Request-ID when it is a sane token, else None."""
    if not value:
        return None
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError:
        return None
    return text if _SANE.fullmatch(text) else None


class RequestIds:
    """ASGI middleware: the request id set for the request (a contextvar, so that log lines
    deep in the call name it) and sent back as X-Request-ID on every answer. Plain ASGI, not
    Starlette's BaseHTTPMiddleware, which costs a task and a stream per request."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = next((value for name, value in scope["headers"] if name == HEADER), None)
        rid = sane(given) or uuid.uuid4().hex
        token = _current.set(rid)

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                headers = [(n, v) for n, v in message.get("headers", []) if n.lower() != HEADER]
                message = {**message, "headers": [*headers, (HEADER, rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _current.reset(token)


class ServerFailure(Exception):
    """A 5xx the endpoint answers: `code` (a short reason) goes to the client, `detail` to the
    log only."""

    def __init__(self, status: int, code: str, detail: str):
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code, self.detail = status, code, detail


def body(error: str, field: Optional[str] = None) -> dict:
    """An error answer's body, with the request id."""
    return {"error": error, "field": field, "request_id": current()}


class ErrorAnswer(req.ErrorAnswer):
    """Every 4xx and 5xx answer of /v1/recommend. A 5xx's `error` is a reason code (503
    no_model_version, 502 tf_serving_refused_request, 500 internal_error), its detail in the
    endpoint's log under request_id."""
    request_id: str = Field(description="the answer's X-Request-ID (the caller's, when a sane "
                            "token, else a new one): the endpoint's log line of a 5xx names it")
