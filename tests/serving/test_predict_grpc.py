"""`python -m pipeline.predict --grpc` (pipeline/predict_grpc.py) prints what the REST path prints,
line for line, against the TF Serving stand-in's own process serving the pushed model, and refuses
as the REST path does (exit 1, the same message shape)."""
from __future__ import annotations

import socket

import pytest

from pipeline import predict
from tests.serving.sample_rows import SAMPLE_CSV
from tests.serving.test_grpc_stub import _started


@pytest.mark.e2e
@pytest.mark.parametrize("signature", predict.SIGNATURES)
def test_grpc_prints_the_rest_paths_lines(pushed_run, pushed_config, signature, tmp_path,
                                          capsys):
    rows = tmp_path / "rows.csv"
    rows.write_text(SAMPLE_CSV)
    process, url, target = _started(pushed_run, pushed_config)
    try:
        printed = {}
        for flag, address in (("--url", url), ("--grpc", target)):
            argv = [flag, address, "--csv", str(rows), "--signature", signature,
                    "--batch-size", "2", "--batching-config", "none",
                    "--model", pushed_config.serving.model_name,
                    "--config", str(pushed_run.config_path)]
            code = predict.main(argv)
            out, err = capsys.readouterr()
            assert code == 0, err
            printed[flag] = out.splitlines()
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert len(printed["--url"]) == SAMPLE_CSV.count("\n") - 1
    assert printed["--grpc"] == printed["--url"]


def test_an_unreachable_grpc_server_is_refused_as_rest_refuses_it(tmp_path, capsys):
    rows = tmp_path / "rows.csv"
    rows.write_text(SAMPLE_CSV)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = predict.main(["--grpc", f"127.0.0.1:{port}", "--csv", str(rows), "--timeout", "5",
                         "--batching-config", "none"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"error: cannot reach TF Serving at 127.0.0.1:{port}: ")
    assert "is the server running?" in err
