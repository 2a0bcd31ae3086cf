"""Published catalog fields are an allowlist (issue 42, item 9): only catalog.public_fields
leave the endpoint; a column added to the catalog file later is not published; a column named in
both public_fields and sensitive_fields, or a public field the file lacks, stops the start with
an error naming the column and the config key (and the file)."""
from __future__ import annotations

import csv
import subprocess
import sys

import httpx
import pytest
import yaml

from core.config import ConfigError
from service.config import load_service_config
from devtools.tf_serving.rest_stub import RestStub
from service.endpoint.app import create_app
from service.endpoint.catalog import CatalogError, load_catalog
from tests.helpers import REPO
from tests.redis_server import redis_server  # noqa: F401
from tests.service.endpoint_env import (V1_ITEMS, canned_retrieve, served, service_config,
                                        write_catalog, write_version)

CONFIG = REPO / "configs" / "recommender_service.yaml"
CONFIGMAP = REPO / "deploy" / "service" / "k8s" / "configmap.yaml"


def with_new_column(path):
    """The test catalog with a column added at the end, as a data change would add it."""
    lines = path.read_text().splitlines()
    lines = [lines[0] + ",supplier_email"] + [f"{line},buyer{n}@supplier.example"
                                               for n, line in enumerate(lines[1:])]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_column_added_to_the_catalog_is_not_published(tmp_path, redis_server):  # noqa: F811
    write_version(tmp_path / "models", 1, V1_ITEMS)
    with RestStub("recommender", canned_retrieve(V1_ITEMS), versions=[1]) as stub:
        service = service_config(tmp_path, redis_server.url, stub.url)
        with_new_column(service.catalog.path)
        app = create_app(service)
        assert app.state.endpoint.catalog.columns == ("title", "category")
        with served(app) as url, httpx.Client(base_url=url, timeout=10) as client:
            answer = client.post("/v1/recommend", json={"user_id": "nobody", "k": 3})
    assert answer.status_code == 200, answer.text
    assert "supplier" not in answer.text
    assert [set(item) for item in answer.json()["items"]] == \
        [{"item_id", "score", "title", "category"}] * 3


def test_only_public_fields_are_held(tmp_path):
    path = write_catalog(tmp_path / "items.csv")
    catalog = load_catalog(path, public_fields=["category"], sensitive_fields=["price"])
    assert catalog.columns == ("category",)
    assert catalog.rows["sku1000"] == {"category": "cat0"}
    assert catalog.item("sku1000", 0.5) == {"item_id": "sku1000", "score": 0.5,
                                            "category": "cat0"}


def _config_file(tmp_path, **catalog):
    raw = yaml.safe_load(CONFIG.read_text())
    raw["pipeline_config"] = str(REPO / "configs" / "recommender.yaml")
    raw["catalog"].update(path=str(REPO / "data" / "catalog" / "items.csv"), **catalog)
    path = tmp_path / "service.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_column_both_public_and_sensitive_is_refused_at_start(tmp_path):
    path = _config_file(tmp_path, public_fields=["title", "price"])
    with pytest.raises(ConfigError) as refused:
        load_service_config(path)
    assert str(path) in str(refused.value)
    assert "catalog.public_fields names ['price'], which catalog.sensitive_fields refuses" in \
        str(refused.value)
    # The endpoint process refuses to start, saying the same.
    process = subprocess.run([sys.executable, "-m", "service.endpoint", "--config", str(path),
                              "--port", "0"], cwd=REPO, capture_output=True, text=True,
                             timeout=120)
    assert process.returncode == 2, process.stderr
    assert "['price'], which catalog.sensitive_fields refuses" in process.stderr
    assert str(path) in process.stderr
    # The catalog loader refuses it too (a config built in code).
    with pytest.raises(CatalogError, match=r"public_fields names \['price'\], which "
                       r"catalog.sensitive_fields refuses"):
        load_catalog(REPO / "data" / "catalog" / "items.csv", public_fields=["price"],
                     sensitive_fields=["price"])


@pytest.mark.parametrize("public, sensitive, message", [
    (["title", "titel"], ["price"], r"catalog.public_fields \['titel'\] are not columns"),
    (["title"], ["unit_costs"], r"catalog.sensitive_fields \['unit_costs'\] are not columns"),
    (["item_id"], [], r"its first column 'item_id' is the item id .* catalog.public_fields "
     "cannot name it"),
], ids=["public-misspelt", "sensitive-misspelt", "item-id"])
def test_a_field_that_is_no_column_is_refused_naming_it(tmp_path, public, sensitive, message):
    path = write_catalog(tmp_path / "items.csv")
    with pytest.raises(CatalogError, match=message) as refused:
        load_catalog(path, public_fields=public, sensitive_fields=sensitive)
    assert str(path) in str(refused.value)


def _bundled_columns():
    with (REPO / "data" / "catalog" / "items.csv").open(newline="") as f:
        return next(csv.reader(f))[1:]


@pytest.mark.parametrize("source", ["configs", "configmap"])
def test_the_configs_publish_the_bundled_catalogs_non_sensitive_columns(source):
    if source == "configs":
        catalog = yaml.safe_load(CONFIG.read_text())["catalog"]
    else:
        data = yaml.safe_load(CONFIGMAP.read_text())["data"]["recommender_service.yaml"]
        catalog = yaml.safe_load(data)["catalog"]
    columns = _bundled_columns()
    assert catalog["public_fields"] == [c for c in columns if c not in
                                        catalog["sensitive_fields"]]
    assert set(catalog["sensitive_fields"]) == {"price", "unit_cost"}
