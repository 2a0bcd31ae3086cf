"""python -m service.endpoint --config configs/recommender_service.yaml [--port N]
[--redis-url URL] [--tf-serving-url URL] [--model-base-path P]

Serves the recommend endpoint with uvicorn (uvloop, httptools, one worker, no access log) and
prints one line once it listens: "recommend endpoint on http://host:port: model M version V, N
items". --port 0 takes a free port (the line names it).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from core.config import ConfigError
from core.service_config import ServiceConfig, load_service_config


def settings(args) -> ServiceConfig:
    service = load_service_config(args.config)
    raw = service.model_dump()
    if args.host is not None:
        raw["endpoint"]["host"] = args.host
    if args.redis_url is not None:
        raw["redis"]["url"] = args.redis_url
    if args.tf_serving_url is not None:
        raw["tf_serving"]["url"] = args.tf_serving_url
    if args.model_base_path is not None:
        raw["model_base_path"] = args.model_base_path.resolve()
    service = ServiceConfig.model_validate(raw)
    if args.port is not None:  # 0: a free port, which the config itself does not allow
        if not 0 <= args.port <= 65535:
            raise ValueError(f"--port {args.port} is not a port (0-65535)")
        endpoint = service.endpoint.model_copy(update={"port": args.port})
        service = service.model_copy(update={"endpoint": endpoint})
    return service


def uvicorn_config(app, service: ServiceConfig):
    """uvicorn's settings: endpoint.limit_concurrency (past it, connections plus requests in
    flight, a 503 at once), keep_alive_timeout_s (an idle kept-alive connection closed) and
    head_timeout_s (protocol.py: httptools with a deadline on the headers); the body's deadline
    is the endpoint's own (request.read_body)."""
    import uvicorn

    from service.endpoint.protocol import with_head_deadline

    s = service.endpoint
    return uvicorn.Config(app, host=s.host, port=s.port, loop="uvloop",
                          http=with_head_deadline(s.head_timeout_s),
                          workers=1, access_log=False, log_level="warning", lifespan="on",
                          limit_concurrency=s.limit_concurrency,
                          timeout_keep_alive=s.keep_alive_timeout_s)


async def serve(app, service: ServiceConfig) -> int:
    import uvicorn

    server = uvicorn.Server(uvicorn_config(app, service))
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if server.started:
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        endpoint = app.state.endpoint
        items = endpoint.versions.current
        model = (f"version {items.version}, {len(items.items)} items" if items
                 else f"no version yet ({endpoint.versions.problem})")
        print(f"recommend endpoint on http://{host}:{port}: model {service.model_name} "
              f"{model}", flush=True)
    await task
    return 0 if server.started else 3


def main(argv=None) -> int:
    from pathlib import Path

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--redis-url")
    parser.add_argument("--tf-serving-url")
    parser.add_argument("--model-base-path", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("aiohttp").setLevel(logging.WARNING)
    from service.endpoint.app import create_app
    from service.endpoint.catalog import CatalogError

    try:
        service = settings(args)
        app = create_app(service)
    except (ConfigError, CatalogError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import uvloop

    return uvloop.run(serve(app, service))


if __name__ == "__main__":
    raise SystemExit(main())
