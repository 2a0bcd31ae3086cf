"""pipeline.predict --log-requests (pipeline/predict_log.py), against the REST stand-in (fast, no
model): the rows sent come back as a serving span, DIR/span-YYYYMMDD/predict-<time>-<pid>.csv in
core/serving_log.py's layout, that the pipeline's reader types exactly as it types the same rows
of the training data (the label absent); --log-sample-rate draws per row; a folder that cannot
take the files is an error, after the answers."""
from __future__ import annotations

import csv
import datetime
import random

import pytest

from core.config import load_config
from core.serving_log import signature_inputs
from pipeline import predict
from pipeline.predict_log import RequestLog
from devtools.tf_serving.rest_stub import RestStub
from tests.serving.list_rows import GOOD, recs_config, write
from tests.serving.test_predict_client_lists import like_the_server


@pytest.fixture(scope="module")
def config_path(tmp_path_factory):
    return recs_config(tmp_path_factory.mktemp("logged"))


@pytest.fixture(scope="module")
def config(config_path):
    return load_config(config_path)


def run(config, config_path, tmp_path, *args) -> int:
    rows = write(tmp_path, GOOD)
    with RestStub(config.serving.model_name, like_the_server) as stub:
        return predict.main(["--config", str(config_path), "--url", stub.url, "--csv",
                             str(rows), "--batch-size", "2", "--batching-config", "none",
                             *map(str, args)])


def examples(path, text, config, columns):
    """The tf.Examples of a CSV text by the pipeline's reader (components/example_gen), its
    feature map by column; `columns` only (a serving span: no label, no ignored columns)."""
    from components.example_gen.csv_reader import parse_csv

    features = config.reader_features
    if columns is not None:  # as the skew check reads a serving span (its serving_reader)
        features = {**features, "label": None, "ignored": [],
                    **{kind: [n for n in features[kind] if n in columns]
                       for kind in ("numeric", "categorical")},
                    **{kind: {n: v for n, v in features[kind].items() if n in columns}
                       for kind in ("ids", "lists")}}
    return [dict(e.features.feature) for e in parse_csv(str(path), text, features,
                                                         config.data.null_markers)]


@pytest.mark.parametrize("signature", ["raw_features", "retrieve"])
def test_the_rows_sent_are_a_serving_span_typed_as_training_rows(config, config_path, tmp_path,
                                                                 signature, capsys):
    logged = tmp_path / "requests"
    assert run(config, config_path, tmp_path, "--signature", signature,
               "--log-requests", logged) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3  # the answers still printed
    [path] = logged.glob("span-*/*.csv")
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d")
    assert path.parent.name == f"span-{today}"
    assert path.name.startswith("predict-") and path.name.endswith(".csv")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    columns = signature_inputs(config, signature)
    assert list(rows[0]) == columns  # no label (clk), no ignored column (uid)
    assert [r["hist"] for r in rows] == ["i1|i3|i4", "i4", ""]  # unpadded
    assert [r["waits"] for r in rows] == ["1.5|2.0", "", "3.0|4.0|0.5"]
    assert [r["hr"] for r in rows] == ["7.0", "20.0", "NA"]  # missing: the null marker
    assert ("item" in columns) == (signature == "raw_features")
    served = examples(path, path.read_text(), config, columns)
    trained = examples(tmp_path / "rows.csv", GOOD, config, None)
    assert served == [{name: row[name] for name in columns if name in row} for row in trained]


def test_the_sample_rate_is_drawn_per_row(config, config_path, tmp_path, capsys):
    logged = tmp_path / "none"
    assert run(config, config_path, tmp_path, "--log-requests", logged,
               "--log-sample-rate", "0") == 0
    assert not list(logged.glob("span-*/*.csv"))
    with pytest.raises(SystemExit) as refused:
        run(config, config_path, tmp_path, "--log-requests", logged, "--log-sample-rate", "1.5")
    assert refused.value.code == 2 and "--log-sample-rate must be in [0, 1]" in \
        capsys.readouterr().err
    log = RequestLog(tmp_path / "drawn", config, "raw_features", 0.25, random.Random(45))
    row = {"hr": 1.0, "dev": "mobile", "item": "i1", "hist": ["i1"], "waits": []}
    log.add([row] * 400)
    assert 70 <= len(log.records) <= 130


def test_rows_are_dated_by_the_time_they_were_sent(config, tmp_path):
    log = RequestLog(tmp_path, config, "retrieve", 1.0)
    row = {"hr": 23.0, "dev": "", "hist": [], "waits": [0.5]}
    midnight = datetime.datetime(2026, 12, 4, tzinfo=datetime.timezone.utc)
    log.add([row, row], now=midnight - datetime.timedelta(seconds=1))
    log.add([row], now=midnight)
    written = log.close()
    assert sorted(p.parent.name for p in written) == ["span-20261203", "span-20261204"]
    assert [p.read_text().count("\n") - 1 for p in sorted(written)] == [2, 1]
    assert sorted(written)[1].read_text() == "hr,dev,hist,waits\n23.0,NA,,0.5\n"


def test_a_folder_that_cannot_take_the_log_is_an_error_after_the_answers(config, config_path,
                                                                         tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert run(config, config_path, tmp_path, "--log-requests", blocker / "requests") == 2
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3
    assert f"error: cannot write the request log under {blocker / 'requests'}" in err
