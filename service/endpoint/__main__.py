"""python -m service.endpoint --config configs/recommender_service.yaml [--port N]
[--admin-port N] [--redis-url URL] [--tf-serving-url URL] [--tf-serving-grpc-target HOST:PORT]
[--tf-serving-protocol grpc|rest] [--model-base-path P] [--bootstrap-servers HOST:PORT]

Serves the recommend endpoint with uvicorn (uvloop, httptools, one worker, no access log): the
public app on endpoint.port, the admin app (admin.py: probes, metrics, docs) on
endpoint.admin_port, two servers in one process and event loop. Prints two lines once both
listen: "recommend endpoint on http://host:port: model M version V, N items", then "admin
(/healthz /readyz /metrics /docs) on http://host:admin_port". --port 0 and --admin-port 0 take
free ports (the lines name them). When either server stops, so does the other.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging

from core.cli import add_config_argument, refuse
from core.config import ConfigError
from service.config import ServiceConfig, load_service_config


def settings(args) -> ServiceConfig:
    service = load_service_config(args.config)
    raw = service.model_dump()
    if args.host is not None:
        raw["endpoint"]["host"] = args.host
    if args.redis_url is not None:
        raw["redis"]["url"] = args.redis_url
    if args.tf_serving_url is not None:
        raw["tf_serving"]["url"] = args.tf_serving_url
    if args.tf_serving_grpc_target is not None:
        raw["tf_serving"]["grpc_target"] = args.tf_serving_grpc_target
    if args.tf_serving_protocol is not None:
        raw["tf_serving"]["protocol"] = args.tf_serving_protocol
    if args.model_base_path is not None:
        raw["model_base_path"] = args.model_base_path.resolve()
    if args.bootstrap_servers is not None:  # the request log's brokers
        raw["kafka"]["bootstrap_servers"] = args.bootstrap_servers
    service = ServiceConfig.model_validate(raw)
    if args.port is not None:  # 0: a free port, which the config itself does not allow
        if not 0 <= args.port <= 65535:
            raise ValueError(f"--port {args.port} is not a port (0-65535)")
        endpoint = service.endpoint.model_copy(update={"port": args.port})
        service = service.model_copy(update={"endpoint": endpoint})
    if args.admin_port is not None:
        if not 0 <= args.admin_port <= 65535:
            raise ValueError(f"--admin-port {args.admin_port} is not a port (0-65535)")
        endpoint = service.endpoint.model_copy(update={"admin_port": args.admin_port})
        service = service.model_copy(update={"endpoint": endpoint})
    return service


def uvicorn_config(app, service: ServiceConfig, admin: bool = False):
    """uvicorn's settings: endpoint.limit_concurrency (past it, connections plus requests in
    flight, a 503 at once), keep_alive_timeout_s (an idle kept-alive connection closed) and
    head_timeout_s (protocol.py: httptools with a deadline on the headers); the body's deadline
    is the endpoint's own (request.read_body). admin: the admin app's, on endpoint.admin_port,
    without a lifespan (the public app's opens and closes what both share)."""
    import uvicorn

    from service.endpoint.protocol import with_head_deadline

    s = service.endpoint
    return uvicorn.Config(app, host=s.host, port=s.admin_port if admin else s.port,
                          loop="uvloop", http=with_head_deadline(s.head_timeout_s),
                          workers=1, access_log=False, log_level="warning",
                          lifespan="off" if admin else "on",
                          limit_concurrency=s.limit_concurrency,
                          timeout_keep_alive=s.keep_alive_timeout_s)


def _admin_server(config):
    """The admin app's server: the public one takes SIGTERM and SIGINT (uvicorn's handlers
    are process-wide: a second server's would replace the first's), and stops this one."""
    import uvicorn

    class AdminServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):
            yield

    return AdminServer(config)


async def _started(server, task) -> bool:
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    return server.started


def _address(server) -> str:
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    return f"http://{host}:{port}"


async def serve(app, service: ServiceConfig) -> int:
    import uvicorn

    server = uvicorn.Server(uvicorn_config(app, service))
    admin = _admin_server(uvicorn_config(app.state.admin, service, admin=True))
    task = asyncio.create_task(server.serve())
    admin_task = None
    if await _started(server, task):
        admin_task = asyncio.create_task(admin.serve())
        if await _started(admin, admin_task):
            endpoint = app.state.endpoint
            items = endpoint.versions.current
            model = (f"version {items.version}, {len(items.items)} items" if items
                     else f"no version yet ({endpoint.versions.problem})")
            print(f"recommend endpoint on {_address(server)}: model {service.model_name} "
                  f"{model}", flush=True)
            print(f"admin (/healthz /readyz /metrics /docs) on {_address(admin)}", flush=True)
        else:
            server.should_exit = True
    tasks = [t for t in (task, admin_task) if t is not None]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    server.should_exit = admin.should_exit = True  # one stopped: the other follows
    await asyncio.gather(*tasks, return_exceptions=True)
    return 0 if server.started and admin.started else 3


def main(argv=None) -> int:
    from pathlib import Path

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_config_argument(parser, required=True)
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--admin-port", type=int)
    parser.add_argument("--redis-url")
    parser.add_argument("--tf-serving-url")
    parser.add_argument("--tf-serving-grpc-target")
    parser.add_argument("--tf-serving-protocol", choices=("grpc", "rest"))
    parser.add_argument("--model-base-path", type=Path)
    parser.add_argument("--bootstrap-servers",
                        help="overrides kafka.bootstrap_servers (the request log's brokers)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("aiohttp").setLevel(logging.WARNING)
    from service.endpoint.app import create_app
    from service.endpoint.catalog import CatalogError

    try:
        service = settings(args)
        app = create_app(service)
    except (ConfigError, CatalogError, ValueError) as e:
        return refuse(e)
    import uvloop

    return uvloop.run(serve(app, service))


if __name__ == "__main__":
    raise SystemExit(main())
