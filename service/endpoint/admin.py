"""The endpoint's admin port (endpoint.admin_port): GET /healthz, /readyz, /metrics, /docs and
/openapi.json, served by a second uvicorn server in the same process (__main__.py).

Apart from the public port (issue 42, item 7): the readiness answer names model-volume paths and
TF Serving's errors, /metrics the service's internals, /docs the whole API; a client of
/v1/recommend gets a 404 for each. In a cluster only Prometheus and the kubelet reach this port
(deploy/service/k8s/networkpolicies.yaml). It shares the public app's Endpoint (the same
metrics, model version and catalog), and the public app's lifespan opens and closes it.
"""
from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.endpoint.errors import RequestIds


def create_admin_app(endpoint, public: FastAPI) -> FastAPI:
    admin = FastAPI(title=f"{public.title} (admin)", openapi_url=None, docs_url=None,
                    redoc_url=None)

    @admin.get("/healthz")
    async def healthz():
        """The process answers at all (liveness)."""
        return {"status": "alive"}

    @admin.get("/readyz")
    async def readyz():
        """A model version's items are loaded (readiness); else why not."""
        items = endpoint.versions.current
        if items is None:
            return JSONResponse({"ready": False, "error": endpoint.versions.problem},
                                status_code=503)
        return {"ready": True, "model_version": items.version, "items": len(items.items),
                "catalog_items": len(endpoint.catalog)}

    @admin.get("/metrics")
    async def metrics():
        return Response(generate_latest(endpoint.metrics.registry),
                        media_type=CONTENT_TYPE_LATEST)

    @admin.get("/openapi.json", include_in_schema=False)
    async def openapi():
        """The public API's schema (the public port serves none)."""
        return JSONResponse(public.openapi())

    @admin.get("/docs", include_in_schema=False)
    async def docs():
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{public.title} docs")

    admin.add_middleware(RequestIds)
    return admin
