"""The client of TF Serving's REST API: `retrieve` predictions and the model status.

One httpx.AsyncClient (a connection pool) for every request. A call's budget is
tf_serving.timeout_ms, one retry on a refused connection included (TF Serving restarting, or
a pod going away behind the Service); no other retries. Failures are TFServingError with the
HTTP status the endpoint answers: 503 when TF Serving is down, timed out or answered 5xx, 502
when it refused the request (4xx: the endpoint's bug, not the client's).
"""
from __future__ import annotations

import json
import time
from typing import List, Tuple

import httpx

from service.endpoint.metrics import Metrics


class TFServingError(Exception):
    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind = status, kind


class TFServing:
    def __init__(self, url: str, model_name: str, timeout_ms: int, metrics: Metrics):
        self.url, self.model_name, self.metrics = url, model_name, metrics
        self.timeout_s = timeout_ms / 1000
        self.client = httpx.AsyncClient(
            base_url=url, timeout=self.timeout_s, trust_env=False,
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20))

    async def status(self) -> dict:
        """GET /v1/models/<name>: the model status (raises on any failure)."""
        answer = await self.client.get(f"/v1/models/{self.model_name}")
        answer.raise_for_status()
        return answer.json()

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

    async def _predict(self, instance: dict) -> dict:
        # NaN (an absent number) is written as NaN, which TF Serving's parser reads.
        content = json.dumps({"signature_name": "retrieve", "instances": [instance]},
                             allow_nan=True).encode()
        path = f"/v1/models/{self.model_name}:predict"
        deadline = time.monotonic() + self.timeout_s
        for attempt in (1, 2):
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise httpx.TimeoutException("no time left for the retry")
                answer = await self.client.post(
                    path, content=content, timeout=left,
                    headers={"Content-Type": "application/json"})
                break
            except httpx.ConnectError as e:
                if attempt == 2:
                    raise TFServingError(503, "refused", f"TF Serving at {self.url} refused the "
                                         f"connection (tried twice): {e}") from None
            except httpx.TimeoutException as e:
                raise TFServingError(503, "timeout", f"TF Serving at {self.url} did not answer "
                                     f"within {self.timeout_s * 1000:.0f} ms: "
                                     f"{type(e).__name__}") from None
            except httpx.TransportError as e:
                raise TFServingError(503, "refused", f"TF Serving at {self.url} broke the "
                                     f"connection: {type(e).__name__}: {e}") from None
        if answer.status_code != 200:
            try:
                message = str(answer.json().get("error", ""))[:300]
            except ValueError:
                message = answer.text[:300]
            status = 503 if answer.status_code >= 500 else 502
            what = "failed" if status == 503 else "refused the request"
            raise TFServingError(status, "status", f"TF Serving at {self.url} {what} "
                                 f"({answer.status_code}): {message}")
        try:
            return answer.json()
        except ValueError:
            raise TFServingError(502, "status", f"TF Serving at {self.url} answered no JSON") \
                from None

    async def close(self) -> None:
        await self.client.aclose()
