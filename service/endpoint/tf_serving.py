"""The client of TF Serving's REST API: `retrieve` predictions and the model status.

One aiohttp.ClientSession (a pool of kept-alive connections) for every request: httpx's async
client was 44 % of the endpoint's CPU per request (py-spy over bench/service_latency.py), about
as much as TF Serving's own work. A call's budget is tf_serving.timeout_ms, one retry on a
connection that failed before any answer (refused: TF Serving restarting or a pod going away
behind the Service; or a kept-alive connection the server had closed) included; no other
retries (predict is read-only, so the retry is safe). Failures are TFServingError with the HTTP
status the endpoint answers: 503 when TF Serving is down, timed out or answered 5xx, 502 when it
refused the request (4xx: the endpoint's bug, not the client's).
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import List, Tuple

import aiohttp

from service.endpoint.metrics import Metrics


class TFServingError(Exception):
    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind = status, kind


# Failures before any answer, worth one retry.
_RETRIED = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError)


class TFServing:
    def __init__(self, url: str, model_name: str, timeout_ms: int, metrics: Metrics):
        """Made inside the running event loop (aiohttp's session belongs to one)."""
        self.url, self.model_name, self.metrics = url, model_name, metrics
        self.timeout_s = timeout_ms / 1000
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=100, keepalive_timeout=30),
            timeout=aiohttp.ClientTimeout(total=self.timeout_s), trust_env=False,
            headers={"Content-Type": "application/json"})
        self.predict_url = f"{url}/v1/models/{model_name}:predict"

    async def status(self) -> dict:
        """GET /v1/models/<name>: the model status (raises on any failure)."""
        async with self.session.get(f"{self.url}/v1/models/{self.model_name}") as answer:
            answer.raise_for_status()
            return await answer.json(content_type=None)

    async def retrieve(self, instance: dict) -> List[Tuple[str, float]]:
        """(item id, score) of `retrieve` for one instance, best first."""
        start = time.perf_counter()
        try:
            body = await self._predict(instance)
        except TFServingError as e:
            self.metrics.tf_serving_errors.labels(e.kind).inc()
            raise
        finally:
            self.metrics.tf_serving_duration.observe(time.perf_counter() - start)
        try:
            row = body["predictions"][0]
            pairs = [(str(i), float(s)) for i, s in zip(row["item_ids"], row["scores"],
                                                         strict=True)]
        except (KeyError, IndexError, TypeError, ValueError) as e:
            self.metrics.tf_serving_errors.labels("status").inc()
            raise TFServingError(502, "status", f"TF Serving at {self.url} answered retrieve "
                                 f"without item_ids and scores: {type(e).__name__}") from None
        return pairs

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
                    raise TFServingError(503, "refused", f"TF Serving at {self.url} refused the "
                                         f"connection (tried twice): {e}") from None
            except asyncio.TimeoutError as e:
                raise TFServingError(503, "timeout", f"TF Serving at {self.url} did not answer "
                                     f"within {self.timeout_s * 1000:.0f} ms: "
                                     f"{type(e).__name__}") from None
            except aiohttp.ClientError as e:
                raise TFServingError(503, "refused", f"TF Serving at {self.url} broke the "
                                     f"connection: {type(e).__name__}: {e}") from None
        if status != 200:
            try:
                message = str(json.loads(raw).get("error", ""))[:300]
            except (ValueError, AttributeError):
                message = raw.decode("utf-8", "replace")[:300]
            code = 503 if status >= 500 else 502
            what = "failed" if code == 503 else "refused the request"
            raise TFServingError(code, "status", f"TF Serving at {self.url} {what} "
                                 f"({status}): {message}")
        try:
            return json.loads(raw)
        except ValueError:
            raise TFServingError(502, "status", f"TF Serving at {self.url} answered no JSON") \
                from None

    async def close(self) -> None:
        await self.session.close()
