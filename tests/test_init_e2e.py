"""A user's session from a new CSV to a pushed model: `python -m pipeline.init`, then the command
it prints, as typed (README: Start from a CSV)."""
from __future__ import annotations

import pytest
import yaml

from tests.helpers import run_cli, versions
from tests.pipeline.test_init import fruit_csv

pytestmark = pytest.mark.e2e


def test_a_new_csv_becomes_a_pipeline_that_runs_and_pushes(tmp_path):
    csv_path = fruit_csv(tmp_path / "fruit.csv", rows=300)
    init = run_cli("pipeline.init", "--csv", str(csv_path), "--label", "kind",
                   "--span", "20261130", "--configs", str(tmp_path / "configs"),
                   "--data", str(tmp_path / "data"), "--outputs", str(tmp_path / "outputs"))
    assert init.returncode == 0, init.stdout + init.stderr
    assert (tmp_path / "data" / "fruit" / "span-20261130" / "fruit.csv").is_file()
    config = yaml.safe_load((tmp_path / "configs" / "fruit.yaml").read_text())
    assert config["features"] == {"label": "kind", "numeric": ["weight_g", "diameter_cm"],
                                  "categorical": ["color"], "ignored": ["id", "farm"]}
    assert config["schema_file"] == "fruit.schema.pbtxt"
    schema = (tmp_path / "configs" / "fruit.schema.pbtxt").read_text()
    assert 'name: "color"' in schema and 'name: "kind"' in schema
    floor = config["evaluation"]["thresholds"]["SparseCategoricalAccuracy"]["lower_bound"]
    assert 0.33 < floor < 0.5  # three classes of about a third each

    command = init.stdout.strip().splitlines()[-1].split()
    assert command[:3] == ["python", "-m", "pipeline.run"], init.stdout
    run = run_cli(*command[2:])
    assert run.returncode == 0, run.stdout + run.stderr
    assert "blessed:    yes" in run.stdout
    assert versions(tmp_path / "outputs" / "fruit" / "serving" / "fruit"), run.stdout
