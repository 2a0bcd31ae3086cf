"""README.md "The recommender", read from the file: its run command names the bundled config, its
curl bodies are what TF Serving takes for the model's `raw_features` and `retrieve` (every
input, lists of one length per request) and what the client builds from the same rows, and its
client commands are the client's."""
from __future__ import annotations

import json
import re
import shlex

import pytest

from core.config import load_config
from pipeline import predict
from tests.helpers import REPO
from service.config import load_service_config
from devtools.tf_serving.rest_stub import row_format_inputs

README = REPO / "README.md"


def section() -> str:
    text = README.read_text()
    assert text.count("\n## The recommender\n") == 1
    return text.split("\n## The recommender\n", 1)[1].split("\n## ", 1)[0]


def commands(block_text: str) -> list:
    """The shell commands of the section's code blocks, continuation lines joined."""
    blocks = re.findall(r"```(?:bash)?\n(.*?)```", block_text, re.S)
    joined = "\n".join(blocks).replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines()
            if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="module")
def config():
    [run] = [c for c in commands(section()) if c.startswith("python -m pipeline.run")]
    assert run == "python -m pipeline.run --config configs/recommender.yaml"
    return load_config(REPO / "configs" / "recommender.yaml")


def bodies() -> dict:
    found = {}
    for body in re.findall(r"-d '(\{.*?\})'", section(), re.S):
        parsed = json.loads(body)
        found[parsed["signature_name"]] = parsed
    return found


@pytest.mark.parametrize("signature", ["raw_features", "retrieve"])
def test_each_documented_request_is_what_the_model_takes_and_the_client_sends(config, signature,
                                                                              tmp_path):
    body = bodies()[signature]
    features = config.features
    inputs = predict.query_inputs(config) if signature == "retrieve" else features.model_inputs
    instances = body["instances"]
    assert all(sorted(i) == sorted(inputs) for i in instances)
    # As TF Serving reads rows (devtools/tf_serving/rest_stub.py): lists of one length in a request.
    dtypes = {name: "float" if name in features.numeric else "string" for name in inputs}
    row_format_inputs(instances, dtypes)
    # The same rows in the click log's CSV layout give the client this very body.
    lists = features.lists
    lines = [",".join(inputs)] + [",".join(
        config.data.list_separator.join(v for v in i[name] if v) if name in lists
        else f"{i[name]:g}" if name in features.numeric else i[name] for name in inputs)
        for i in instances]
    path = tmp_path / "rows.csv"
    path.write_text("\n".join(lines) + "\n")
    rows = predict.read_rows(path, features, config.data.null_markers,
                             config.data.list_separator, inputs)
    assert predict.build_request([r.values for r in rows], features, signature, inputs) == body


def test_the_documented_endpoint_image_and_client_commands_are_the_configs(config):
    text = section()
    assert text.count(f"localhost:8501/v1/models/{config.serving.model_name}:predict") == 2
    mount = re.search(r'-v "\$PWD/([^:]+):/models/(\w+):ro"', text)
    assert mount and (REPO / mount[1]).resolve() == config.model_base_path.resolve()
    assert mount[2] == config.serving.model_name == re.search(r"MODEL_NAME=(\w+)", text)[1]
    clients = [shlex.split(c, comments=True)[3:] for c in commands(text)
               if c.startswith("python -m pipeline.predict")]
    assert len(clients) == 3
    parsed = [predict.parse_args(argv) for argv in clients]
    assert [a.signature for a in parsed] == ["raw_features", "retrieve", "retrieve"]
    # Two over REST on TF Serving's 8501, the last over gRPC on the port the stand-in and the
    # service config name (TF Serving's --port default, 8500).
    assert [a.url for a in parsed] == ["http://localhost:8501"] * 2 + [None]
    assert parsed[2].grpc.rsplit(":", 1)[1] == load_service_port()
    assert all(a.config.resolve() == (REPO / "configs" / "recommender.yaml").resolve()
               for a in parsed)


def load_service_port() -> str:
    service = load_service_config(REPO / "configs" / "recommender_service.yaml")
    return service.tf_serving.grpc_target.rsplit(":", 1)[1]
