"""A click log this repository has never seen, from `python -m pipeline.init` alone to a pushed
recommender: other column names and id spellings (scripts/generate_clicks.py --style unseen, the
same planted structure), string item ids, a `|`-separated history, context columns, a 0/1 label.
init must keep the item column as an id, read the history as a list sharing its vocabulary, choose
the two-tower model, and the model must beat item popularity clearly: the history is used."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, load_yaml, run_cli, versions

pytestmark = pytest.mark.e2e


def test_an_unseen_click_log_becomes_a_recommender_that_beats_popularity(tmp_path):
    generated = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "generate_clicks.py"), "--out",
         str(tmp_path / "log"), "--style", "unseen", "--rows", "60000", "--seed", "11"],
        capture_output=True, text=True, check=True)
    aucs = json.loads(generated.stdout.strip().splitlines()[-1])["auc"]
    [csv_path] = (tmp_path / "log").glob("*.csv")
    label = "bought"
    init = run_cli("pipeline.init", "--csv", str(csv_path), "--label", label,
                   "--configs", str(tmp_path / "configs"), "--data", str(tmp_path / "data"),
                   "--outputs", str(tmp_path / "outputs"))
    assert init.returncode == 0, init.stdout + init.stderr
    [config_path] = (tmp_path / "configs").glob("*.yaml")
    config = load_yaml(config_path.read_text())
    features = config["features"]
    assert list(features["ids"]) == ["product"]
    assert features["lists"]["recent_products"]["vocabulary"] == "product"
    assert config["model_module"] == "two_tower" and config["retrieval"]["candidate"] == "product"
    assert "visitor" in features["ignored"]
    assert re.search(r"recent_products: list of categorical .* shares product's vocabulary",
                     init.stdout), init.stdout

    command = init.stdout.strip().splitlines()[-1].split()
    assert command[:3] == ["python", "-m", "pipeline.run"], init.stdout
    run = run_cli(*command[2:], timeout=1500)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    auc = float(re.search(r"^\s+auc\s+([0-9.]+)", run.stdout, re.M).group(1))
    print(f"\nunseen log: AUC {auc:.4f}; achievable {aucs['achievable']}; popularity "
          f"{aucs['popularity']}")
    assert auc > aucs["popularity"] + 0.1, run.stdout
    assert "blessed:    yes" in run.stdout
    assert versions(tmp_path / "outputs" / config["pipeline_name"] / "serving"
                    / config["serving"]["model_name"]), run.stdout
    assert re.search(r"retrieval:\s+hit rate at 10", run.stdout), run.stdout
