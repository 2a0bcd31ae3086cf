"""The client of TF Serving's REST API: `retrieve` predictions and the model status.

One aiohttp.ClientSession (a pool of kept-alive connections) for every request: httpx's async
client was 44 % of the endpoint's CPU per request (py-spy over bench/service_latency.py), about
as much as TF Serving's own work. A call's budget is tf_serving.timeout_ms, one retry on a
connection that failed before any answer (refused: TF Serving restarting or a pod going away
behind the Service; or a kept-alive connection the server had closed) included; no other
retries (predict is read-only, so the retry is safe).

Failures are TFServingError. When TF Serving is down (refused), slow (timeout), erring (5xx) or
answered something that is not retrieve's answer, its `fallback` names why and the endpoint
answers the popularity fallback with that reason (a brownout degrades the answer instead of
failing it); these count towards the circuit breaker (service/endpoint/breaker.py), which, open,
makes no call at all (reason circuit_open). A 4xx is the endpoint's own bug (a request TF Serving
refuses, every time): no fallback hides it, the endpoint answers 502, and it counts as TF Serving
answering.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import List, Optional, Tuple

import aiohttp

from service.endpoint.breaker import CLOSED, OPEN, STATE_VALUES, CircuitBreaker
from service.endpoint.metrics import Metrics

log = logging.getLogger("service.endpoint")
STATUS_TIMEOUT_S = 1.0
# The answer's fallback_reason for each kind of failure that the fallback answers.
FALLBACK = {"refused": "tf_serving_refused", "timeout": "tf_serving_timeout",
            "status": "tf_serving_error", "answer": "tf_serving_error"}


class TFServingError(Exception):
    """kind: refused, timeout, status (an HTTP error) or answer (no retrieve answer in a 200).
    status: the HTTP status for a failure the endpoint answers as one (502); fallback: the
    fallback_reason when the endpoint answers the popularity fallback instead (None: it does
    not)."""

    def __init__(self, status: int, kind: str, message: str, fallback: Optional[str] = None):
        super().__init__(message)
        self.status, self.kind, self.fallback = status, kind, fallback


# Failures before any answer, worth one retry.
_RETRIED = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError)


class TFServing:
    def __init__(self, url: str, model_name: str, timeout_ms: int, metrics: Metrics,
                 breaker_failures: int = 5, breaker_cooldown_s: float = 5.0):
        """Made inside the running event loop (aiohttp's session belongs to one)."""
        self.url, self.model_name, self.metrics = url, model_name, metrics
        self.timeout_s = timeout_ms / 1000
        self.breaker = CircuitBreaker(breaker_failures, breaker_cooldown_s, self._changed)
        metrics.tf_serving_circuit.set(STATE_VALUES[self.breaker.state])
        self._connect()

    def _connect(self) -> None:
        """The wire: one aiohttp session (a pool of kept-alive connections)."""
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=100, keepalive_timeout=30),
            timeout=aiohttp.ClientTimeout(total=self.timeout_s), trust_env=False,
            headers={"Content-Type": "application/json"})
        self.predict_url = f"{self.url}/v1/models/{self.model_name}:predict"

    async def status(self) -> dict:
        """GET /v1/models/<name>: the model status (raises on any failure). Off the request
        path (start-up, the refresh task), so not held to a retrieve call's budget: 1 s."""
        async with self.session.get(f"{self.url}/v1/models/{self.model_name}",
                                    timeout=aiohttp.ClientTimeout(total=STATUS_TIMEOUT_S)) \
                as answer:
            answer.raise_for_status()
            return await answer.json(content_type=None)

    async def retrieve(self, instance: dict) -> List[Tuple[str, float]]:
        """(item id, score) of `retrieve` for one instance, best first."""
        if not self.breaker.allow():
            raise TFServingError(503, "circuit_open", f"TF Serving at {self.url}: the circuit "
                                 "is open (no call made)", fallback="circuit_open")
        start = time.perf_counter()
        try:
            pairs = _pairs(await self._predict(instance), self.url)
        except TFServingError as e:
            self.metrics.tf_serving_errors.labels(e.kind).inc()
            if e.fallback:
                self.breaker.failure(str(e))
            else:  # a 4xx: TF Serving is up, the request was wrong
                self.breaker.success()
            raise
        except BaseException:  # cancelled: no verdict on TF Serving
            self.breaker.abandoned()
            raise
        finally:
            self.metrics.tf_serving_duration.observe(time.perf_counter() - start)
        self.breaker.success()
        return pairs

    def _changed(self, old: str, new: str, why: str) -> None:
        """One log line and the gauge per change of the breaker's state, never per request."""
        self.metrics.tf_serving_circuit.set(STATE_VALUES[new])
        level = logging.WARNING if (old, new) == (CLOSED, OPEN) else logging.INFO
        log.log(level, "TF Serving circuit %s -> %s: %s", old, new, why)

    async def post(self, url: str, content: bytes, timeout_s: float) -> Tuple[int, bytes]:
        """One POST: (status, body). The seam the retry test refuses through."""
        async with self.session.post(url, data=content,
                                     timeout=aiohttp.ClientTimeout(total=timeout_s)) as answer:
            return answer.status, await answer.read()

    async def _predict(self, instance: dict) -> dict:
        # NaN (an absent number) is written as NaN, which TF Serving's parser reads.
        content = json.dumps({"signature_name": "retrieve", "instances": [instance]},
                             allow_nan=True).encode()
        deadline = time.monotonic() + self.timeout_s
        for attempt in (1, 2):
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise asyncio.TimeoutError("no time left for the retry")
                status, raw = await self.post(self.predict_url, content, left)
                break
            except _RETRIED as e:
                if attempt == 2:
                    raise _failed("refused", f"TF Serving at {self.url} refused the "
                                  f"connection (tried twice): {e}") from None
            except asyncio.TimeoutError as e:
                raise _failed("timeout", f"TF Serving at {self.url} did not answer within "
                              f"{self.timeout_s * 1000:.0f} ms: {type(e).__name__}") from None
            except aiohttp.ClientError as e:
                raise _failed("refused", f"TF Serving at {self.url} broke the connection: "
                              f"{type(e).__name__}: {e}") from None
        if status != 200:
            try:
                message = str(json.loads(raw).get("error", ""))[:300]
            except (ValueError, AttributeError):
                message = raw.decode("utf-8", "replace")[:300]
            if status >= 500:
                raise _failed("status", f"TF Serving at {self.url} failed ({status}): {message}")
            raise TFServingError(502, "status", f"TF Serving at {self.url} refused the request "
                                 f"({status}): {message}")
        try:
            return json.loads(raw)
        except ValueError:
            raise _failed("answer", f"TF Serving at {self.url} answered no JSON") from None

    async def close(self) -> None:
        await self.session.close()


def _failed(kind: str, message: str) -> TFServingError:
    """A failure of TF Serving itself: the fallback answers it."""
    return TFServingError(503, kind, message, fallback=FALLBACK[kind])


def _pairs(body, url: str) -> List[Tuple[str, float]]:
    try:
        row = body["predictions"][0]
        return [(str(i), float(s)) for i, s in zip(row["item_ids"], row["scores"], strict=True)]
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise _failed("answer", f"TF Serving at {url} answered retrieve without item_ids and "
                      f"scores: {type(e).__name__}") from None
