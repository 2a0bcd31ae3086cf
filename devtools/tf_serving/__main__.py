"""TF Serving's REST API on loopback, answered by a pushed model through the TF1 session loader.

The stand-in of devtools/tf_serving/rest_stub.py (TF Serving's REST rules at 2.16.1 and 2.20.0)
as a process of its own, for `make service-up` and the service's end-to-end tests on a machine
without `tensorflow_model_server`: it loads the newest complete version under the model's base
path (a numbered folder holding saved_model.pb, as TF Serving's default version policy picks),
replays its warmup records (assets.extra/tf_serving_warmup_requests) before it answers, as TF
Serving does before it marks a version AVAILABLE (servables/tensorflow/saved_model_warmup.cc:
otherwise the first `retrieve` pays seconds of graph set-up), then answers predict calls with it
and the model status API with that version.

    python -m devtools.tf_serving --model-base-path outputs/recommender/serving/recommender \
        --model-name recommender --port 8501
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Optional

from core import storage
from devtools.tf_serving.rapidjson import DEFAULT_SERVER_VERSION, SERVER_VERSIONS


def newest_version(base: Path) -> Optional[str]:
    """The numbered folder TF Serving's `latest` policy serves: the largest `[0-9]+` name
    holding a saved_model.pb (an unfinished push has none)."""
    if not base.is_dir():
        return None
    newest = storage.newest_version(p.name for p in base.iterdir()
                                    if (p / "saved_model.pb").is_file())
    return newest  # the folder's own name (`0012` stays `0012`)


def _warm_up(model, version_dir: Path) -> int:
    """Runs every warmup record's request once (a bad record fails the start, as it fails the
    version's load in TF Serving); returns how many ran."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    path = version_dir / "assets.extra" / "tf_serving_warmup_requests"
    if not path.is_file():
        return 0
    count = 0
    for record in tf.data.TFRecordDataset(str(path)):
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        model.run_request(log.predict_log.request)
        count += 1
    return count


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-base-path", type=Path, required=True)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--port", type=int, default=8501, help="REST (TF Serving's "
                        "--rest_api_port)")
    parser.add_argument("--grpc-port", type=int, default=8500, help="gRPC (TF Serving's --port; "
                        "0: any free port, printed)")
    parser.add_argument("--version-label", action="append", default=[], metavar="LABEL=VERSION",
                        help="a version label gRPC's ModelSpec.version_label names (the model "
                        "config's version_labels); the version must be the one served")
    parser.add_argument("--server-version", choices=SERVER_VERSIONS,
                        default=DEFAULT_SERVER_VERSION)
    args = parser.parse_args(argv)
    version = newest_version(args.model_base_path)
    if version is None:
        print(f"error: no version to serve under {args.model_base_path} (a numbered folder with "
              "saved_model.pb): run the pipeline first, e.g. `python -m pipeline.run --config "
              "configs/recommender.yaml`", file=sys.stderr)
        return 1
    labels = {}
    for item in args.version_label:
        label, _, number = item.partition("=")
        if not label or not number.isdigit():
            print(f"error: --version-label {item!r}: write LABEL=VERSION, e.g. stable={version}",
                  file=sys.stderr)
            return 1
        labels[label] = int(number)
    from devtools.tf_serving.grpc_stub import GrpcStub
    from devtools.tf_serving.metrics import Metrics
    from devtools.tf_serving.rest_stub import RestStub
    from devtools.tf_serving.servables import ServableError, Servables
    from devtools.tf_serving.session_model import SessionModel

    try:  # TF Serving refuses a config whose label names a version it does not serve
        servables = Servables(args.model_name, [int(version)], labels)
    except ServableError as error:
        print(f"error: {error.code}: {error}", file=sys.stderr)
        return 1

    model = SessionModel(args.model_base_path / version)
    replayed = _warm_up(model, args.model_base_path / version)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    metrics = Metrics()  # one set for both APIs, served on the REST port
    # gRPC listens first, as in TF Serving's model_servers/server.cc, whose Server::BuildAndStart
    # starts the gRPC server, then the HTTP one (its log: "Running gRPC ModelServer at", then
    # "Exporting HTTP/REST API at"): a client that sees REST answer finds gRPC listening.
    with GrpcStub(servables, model, metrics=metrics, port=args.grpc_port) as grpc_stub, \
            RestStub(args.model_name, model.predict_instances, versions=[int(version)],
                     server_version=args.server_version, port=args.port,
                     metrics=metrics) as stub:
        print(f"TF Serving {args.server_version} stand-in: {args.model_name} version {version} "
              f"on {stub.url} and gRPC {grpc_stub.target} ({replayed} warmup records replayed)",
              flush=True)
        try:
            stopped.wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
