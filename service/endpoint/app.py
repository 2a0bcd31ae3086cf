"""The endpoint's public route, POST /v1/recommend; GET /healthz, /readyz, /metrics, /docs and
/openapi.json are on the admin port (admin.py, app.state.admin), a 404 here.

    app = create_app(load_service_config("configs/recommender_service.yaml"))

create_app loads the catalog (a bad one fails here, before anything serves); the app's lifespan
opens the Redis and TF Serving clients, reads the model version once and refreshes it every
tf_serving.refresh_s in a background task.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse

from core.click_history import FEATURE
from service.logins import redis_options
from service.config import ServiceConfig
from service.endpoint import errors
from service.endpoint import request as req
from service.endpoint.admin import create_admin_app
from service.endpoint.auth import Authenticator, Unauthorized
from service.endpoint.catalog import load_catalog
from service.endpoint.history import HistoryReader, merged
from service.endpoint.metrics import Metrics
from service.endpoint.model_items import ModelVersions
from service.endpoint.tf_serving import TFServingError
from service.endpoint.tf_serving_grpc import tf_serving_client
from service.request_log import RequestLog

log = logging.getLogger("service.endpoint")
ERRORS = {code: {"model": errors.ErrorAnswer, "description": what} for code, what in (
    (400, "a refused field (named in `field`)"), (413, "the body is over max_body_bytes"),
    (408, "the body did not arrive whole within body_timeout_s"),
    (401, "a credential that is not good (forged, expired, another audience or issuer): its "
     "reason, WWW-Authenticate; no credential at all is the anonymous fallback, a 200"),
    (403, "user_id names another user than the authenticated one"),
    (502, "tf_serving_refused_request: TF Serving refused the endpoint's request (a 4xx: TF "
     "Serving down, slow or erring is the fallback, a 200)"),
    (503, "no_model_version: no model version loaded"),
    (500, "internal_error: a failure of the endpoint itself"))}


class Endpoint:
    """What one app holds: settings, catalog, metrics, the model version and the clients."""

    def __init__(self, service: ServiceConfig):
        pipeline = service.pipeline
        if pipeline.retrieval is None:
            raise ValueError(f"{service.pipeline_config} has no `retrieval`: the model has no "
                             "retrieve signature to recommend with")
        self.service, self.spec = service, service.history_spec()
        self.numeric = list(pipeline.features.numeric)
        self.categorical = list(pipeline.features.categorical)
        self.domains = service.endpoint.context_domains
        self.auth = Authenticator(service.auth)
        self.model = req.request_model(self.numeric, self.categorical, self.domains,
                                       user_required=service.auth.mode == "none")
        self.catalog = load_catalog(service.catalog.path,
                                    public_fields=service.catalog.public_fields,
                                    sensitive_fields=service.catalog.sensitive_fields)
        self.metrics = Metrics()
        self.versions = ModelVersions(service.model_versions_path(),
                                      pipeline.retrieval.candidate, pipeline.retrieval.k)
        # The endpoint's Redis login and TLS, its password read now: a missing Secret stops the
        # start with the config key named, not the first request.
        self.redis_options = redis_options(service.redis, "endpoint")
        self.history = self.tf = self.request_log = None

    async def start(self) -> None:
        s = self.service
        self.history = HistoryReader(s.redis.url, s.redis.timeout_ms, s.history.key_prefix,
                                     **self.redis_options)
        self.tf = tf_serving_client(s.tf_serving, s.model_name, self.metrics)
        # Its Kafka login's password read now: a missing Secret stops the start.
        self.request_log = RequestLog(s, self.metrics)
        await self.versions.refresh(self.tf.status)

    async def refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.service.tf_serving.refresh_s)
            try:
                await self.versions.refresh(self.tf.status)
            except Exception:  # noqa: BLE001 (the loop outlives any one failure)
                log.exception("model version refresh failed")

    async def stop(self) -> None:
        await self.history.close()
        await self.tf.close()
        # A short bounded wait (request_log.flush_timeout_s) for the queued records.
        await asyncio.to_thread(self.request_log.stop)

    def instance(self, history: list, context) -> dict:
        """retrieve's instance: the history padded with "" to its length, absent features
        NaN / ""."""
        row = {FEATURE: history + [""] * (self.spec.length - len(history))}
        values = dict(context or {})
        for name in self.numeric:
            value = values.get(name)
            row[name] = math.nan if value is None else float(value)
        for name in self.categorical:
            row[name] = values.get(name) or ""
        return row

    async def recommend(self, request: Request) -> dict:
        # Before the body: a bad credential is a 401 whatever it asks.
        user = await self.auth.identify(request)
        raw = await req.read_body(request, self.service.endpoint.max_body_bytes,
                                  self.service.endpoint.body_timeout_s)
        body = req.parse(raw, self.model)
        items = self.versions.current
        if items is None:
            raise errors.ServerFailure(503, "no_model_version", self.versions.problem)
        req.check(body, items.k, items.vocabulary, self.service.endpoint.max_excluded,
                  self.domains)
        if self.service.auth.mode == "none":
            user = body.user_id
        elif user is not None and body.user_id not in (None, user):
            raise req.Refused(403, "user_id is not the authenticated user's: leave it out",
                              "user_id")
        m = self.metrics
        excluded = frozenset(body.exclude_item_ids)
        reason, pairs, history = None, [], []
        if user is None:  # no identity: no history read, nothing personal (exclude_seen too)
            reason = "anonymous"
        else:
            stored = await self.history.read(user)
            m.history_reads.labels("error" if stored is None else "hit" if stored
                                   else "miss").inc()
            history = merged(stored or [], body.recent_item_ids, self.spec)
            if not history:
                reason = "redis_error" if stored is None else "no_history"
        if body.exclude_seen:
            excluded = excluded | frozenset(history)
        if reason is None:
            context = body.context.model_dump() if body.context is not None else None
            instance = self.instance(history, context)
            try:
                pairs = await self.tf.retrieve(instance)
            except TFServingError as e:
                if e.fallback is None:  # TF Serving refused the request: the endpoint's bug
                    raise errors.ServerFailure(e.status, "tf_serving_refused_request",
                                               str(e)) from None
                reason = e.fallback  # TF Serving down, slow or erring: degrade, not fail
            finally:  # what the model was asked, answered or not (sampled; never raises)
                self.request_log.log(user, instance, history, items.version)
        if reason is None:
            chosen = [(i, s) for i, s in pairs if i not in excluded][:body.k]
        else:
            m.fallbacks.labels(reason).inc()
            chosen = [(i, None) for i in items.fallback(body.k, excluded)]
        return {"items": [self.catalog.item(i, s) for i, s in chosen],
                "model_version": items.version,
                "history": "fallback" if reason else "redis", "fallback_reason": reason}


def create_app(service: ServiceConfig) -> FastAPI:
    endpoint = Endpoint(service)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await endpoint.start()
        task = asyncio.create_task(endpoint.refresh_forever())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await endpoint.stop()

    # No docs or schema here: the admin port serves them (admin.py).
    app = FastAPI(title="recommend endpoint", lifespan=lifespan,
                  description=__doc__.split("\n\n")[0], openapi_url=None, docs_url=None,
                  redoc_url=None)
    app.state.endpoint = endpoint
    app.add_middleware(errors.RequestIds)

    @app.exception_handler(RequestValidationError)
    async def refused(request, error: RequestValidationError):
        """FastAPI's 422 answered as every other refusal: a 400 naming the field."""
        first = error.errors()[0] if error.errors() else {"loc": (), "msg": "invalid request"}
        field = req.field_name(first["loc"]) or None
        return JSONResponse(errors.body(f"{field}: {first['msg']}", field), status_code=400)

    @app.post("/v1/recommend", response_model=req.RecommendAnswer, responses=ERRORS,
              openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                  "schema": {"$ref": "#/components/schemas/RecommendRequest"}}}}})
    async def recommend(request: Request):
        """The user's top k: retrieve's items for their history, or the popular fallback."""
        start, status = time.perf_counter(), 500
        try:
            answer = await endpoint.recommend(request)
            status = 200
            return JSONResponse(answer)
        except Unauthorized as e:
            status = 401
            return JSONResponse(errors.body(e.reason), status_code=401, headers=e.headers())
        except req.Refused as e:
            status = e.status
            return JSONResponse({**e.body(), "request_id": errors.current()},
                                status_code=e.status, headers=e.headers)
        except errors.ServerFailure as e:  # the reason code out, the detail to the log only
            status = e.status
            log.error("request %s: %d %s: %s", errors.current(), e.status, e.code, e.detail)
            return JSONResponse(errors.body(e.code), status_code=e.status)
        except Exception:
            log.exception("request %s: 500 internal_error", errors.current())
            return JSONResponse(errors.body("internal_error"), status_code=500)
        finally:
            endpoint.metrics.requests.labels(str(status)).inc()
            endpoint.metrics.duration.observe(time.perf_counter() - start)

    def openapi():
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version,
                                 description=app.description, routes=app.routes)
            definitions = endpoint.model.model_json_schema(
                ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(definitions.pop("$defs", {}))
            components["RecommendRequest"] = definitions
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
    app.state.admin = create_admin_app(endpoint, app)
    return app
