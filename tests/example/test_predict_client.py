"""pipeline.predict on the bundled example: the serving README's raw_features request, as the
client builds it from the example's CSV columns (the client's own tests: tests/serving)."""
from __future__ import annotations

from pipeline import predict
from core.config import load_config
from tests.example.readme_examples import raw_features_body

HEADER = "species,island,bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g,sex,year"


def test_request_body_of_documented_rows_is_the_documented_body(tmp_path):
    """deploy/serving/README.md's raw_features curl example, as the client builds it from CSV."""
    config = load_config()
    documented = raw_features_body()
    lines = [HEADER] + [",".join(["Adelie", *(str(i[n]) for n in HEADER.split(",")[1:-1]), "2009"])
                        for i in documented["instances"]]
    path = tmp_path / "rows.csv"
    path.write_text("\n".join(lines))
    rows = predict.read_rows(path, config.features,
                             config.data.null_markers)
    assert predict.build_request([r.values for r in rows], config.features) == documented
