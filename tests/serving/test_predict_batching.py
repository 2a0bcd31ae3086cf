"""pipeline.predict keeps each request within the server's max_batch_size, read from the deploy's
batching config, and splits a larger --batch-size; against a stand-in that refuses a larger
request as TF Serving does (rest_stub.py: the batch scheduler's "Task size ..."), at both server
versions."""
from __future__ import annotations

import pytest

from pipeline import predict
from tests.helpers import write_config
from devtools.tf_serving.rapidjson import SERVER_VERSIONS
from devtools.tf_serving.rest_stub import RestStub

HEADER = "kind,site,size"
ROWS = "".join(f"k{i % 2},s{i},{i}.5\n" for i in range(7))


@pytest.fixture(scope="module")
def config_path(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("batching"), {
        "features": {"label": "kind", "numeric": ["size"], "categorical": ["site"]},
        "schema_file": None, "serving.model_name": "demo"})


def canned(signature, instances):
    return [{"class_name": "k0", "probabilities": [0.75, 0.25]} for _ in instances]


def batching_config(tmp_path, text="max_batch_size { value: 3 }\nbatch_timeout_micros "
                                   "{ value: 2000 }\n"):
    path = tmp_path / "batching.config"
    path.write_text(text)
    return path


def run(config_path, tmp_path, stub, *args):
    csv = tmp_path / "rows.csv"
    csv.write_text(f"{HEADER}\n{ROWS}")
    return predict.main(["--config", str(config_path), "--url", stub.url, "--csv", str(csv),
                         *map(str, args)])


@pytest.mark.parametrize("server_version", SERVER_VERSIONS)
def test_a_batch_size_above_max_batch_size_is_split(tmp_path, config_path, capsys,
                                                    server_version):
    with RestStub("demo", canned, server_version=server_version, max_batch_size=3) as stub:
        code = run(config_path, tmp_path, stub, "--batch-size", 5, "--batching-config",
                   batching_config(tmp_path))
    out, err = capsys.readouterr()
    assert code == 0 and len(out.splitlines()) == 7
    assert [len(body["instances"]) for body in stub.received] == [3, 3, 1]
    assert f"--batch-size 5 is above max_batch_size 3 in {tmp_path / 'batching.config'}" in err


@pytest.mark.parametrize("server_version", SERVER_VERSIONS)
def test_without_the_limit_the_server_refuses_the_request(tmp_path, config_path, capsys,
                                                          server_version):
    # Negative control: the same request size with no batching config is what the server refuses.
    with RestStub("demo", canned, server_version=server_version, max_batch_size=3) as stub:
        code = run(config_path, tmp_path, stub, "--batch-size", 5, "--batching-config", "none")
    err = capsys.readouterr().err
    assert code == 1 and [len(body["instances"]) for body in stub.received] == [5]
    assert "answered 400: Task size 5 is larger than maximum input batch size 3" in err


def test_a_batch_size_within_the_limit_is_kept(tmp_path, config_path, capsys):
    with RestStub("demo", canned, max_batch_size=3) as stub:
        assert run(config_path, tmp_path, stub, "--batch-size", 2, "--batching-config",
                   batching_config(tmp_path)) == 0
    assert [len(body["instances"]) for body in stub.received] == [2, 2, 2, 1]
    assert "note:" not in capsys.readouterr().err


def test_the_deploys_batching_config_is_the_default_and_read_as_the_server_reads_it():
    # The BatchingParameters message as tensorflow_model_server parses the file (the deploy
    # tests build it from session_bundle_config.proto).
    from tests.deploy.test_serving_artifacts import parse_batching_config

    assert predict.parse_args(["--url", "u", "--csv", "c"]).batching_config == \
        predict.BATCHING_CONFIG
    text = predict.BATCHING_CONFIG.read_text()
    limit = parse_batching_config(text).max_batch_size.value
    assert predict.max_batch_size(predict.BATCHING_CONFIG) == limit
    # The figure the serving README gives.
    readme = (predict.BATCHING_CONFIG.parents[1] / "README.md").read_text()
    assert f"`max_batch_size` ({limit})" in readme


@pytest.mark.parametrize("text, limit", [
    ("max_batch_size { value: 7 }", 7),
    ("max_batch_size: {\n  value: 9\n}  # a comment", 9),
    ("# max_batch_size { value: 5 }\nbatch_timeout_micros { value: 1 }", 1000),  # the default
])
def test_max_batch_size_text_proto_forms(tmp_path, text, limit):
    assert predict.max_batch_size(batching_config(tmp_path, text)) == limit


@pytest.mark.parametrize("text, problem", [
    ("max_batch_size { value: x }", "cannot read max_batch_size"),
    ("max_batch_size { value: 0 }", "max_batch_size 0 must be at least 1"),
])
def test_an_unreadable_limit_exits_2_naming_the_file(tmp_path, config_path, capsys, text,
                                                     problem):
    with RestStub("demo", canned) as stub:
        code = run(config_path, tmp_path, stub, "--batching-config",
                   batching_config(tmp_path, text))
    err = capsys.readouterr().err
    assert code == 2 and stub.received == []
    assert f"{tmp_path / 'batching.config'}" in err and problem in err
