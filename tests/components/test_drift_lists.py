"""The drift gate on id and list features (configs/recommender.yaml's kinds, on a sample of the
bundled click spans): each is measured, a list by its values (TFDV's L-infinity distance over
them), and a span whose histories all became one item drifts in the history only."""
from __future__ import annotations

import shutil

import pytest

from tests.helpers import REPO

CONFIG_PATH = REPO / "configs" / "recommender.yaml"
ROWS = 3000


@pytest.fixture(scope="module")
def spans(tmp_path_factory):
    from core.config import load_config

    config = load_config(CONFIG_PATH)
    folder = tmp_path_factory.mktemp("click_spans")
    for span in sorted(config.data.input_base.iterdir()):
        if span.is_dir():
            (folder / span.name).mkdir()
            for path in span.glob("*.csv"):
                lines = path.read_text().splitlines(keepends=True)[:ROWS + 1]
                (folder / span.name / path.name).write_text("".join(lines))
    return config, folder


def _compare(config, data):
    import tensorflow_data_validation as tfdv

    from components.drift_gate import component as gate
    from components.example_gen.csv_reader import files_in_window

    reader = config.reader_settings
    files = files_in_window(str(data), config.data.file_pattern, 10 ** 6, 2)
    schema = tfdv.infer_schema(gate.span_statistics(
        [f for paths in files.values() for f in paths], reader))
    return gate, gate.compare_spans(files, schema, reader, config.drift_thresholds())


def test_ids_and_lists_are_measured_by_their_values(spans):
    config, data = spans
    gate, result = _compare(config, data)
    by_feature = {f["feature"]: f for f in result["features"]}
    assert set(by_feature) == {config.features.label, *config.features.model_inputs}
    for name in ("item_id", "user_click_history"):
        assert by_feature[name]["measure"] == gate.L_INF
        assert by_feature[name]["distance"] is not None and not by_feature[name]["drifted"]


def test_histories_that_all_became_one_item_drift_in_the_history_only(spans, tmp_path):
    config, data = spans
    moved = tmp_path / "data"
    shutil.copytree(data, moved)
    newest = sorted(p for p in moved.iterdir() if p.is_dir())[-1]
    for path in newest.glob("*.csv"):
        header, *rows = path.read_text().splitlines()
        column = header.split(",").index("user_click_history")
        rows = [",".join(cells[:column] + ["sku1|sku1"] + cells[column + 1:])
                for cells in (row.split(",") for row in rows)]
        path.write_text("\n".join([header, *rows]) + "\n")
    _, result = _compare(config, moved)
    assert [f["feature"] for f in result["features"] if f["drifted"]] == ["user_click_history"]
