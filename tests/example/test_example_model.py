"""The model the bundled example trains (the session's pushed run on data/penguins): clear cases
of each species get their species, through both signatures."""
from __future__ import annotations

import pytest

from tests.helpers import read_as


pytestmark = pytest.mark.e2e

HEADER = "species,island,bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g,sex,year"
CLEAR_CASES = f"""{HEADER}
Adelie,Torgersen,39.1,18.7,181,3750,male,2007
Gentoo,Biscoe,50.0,15.2,218,5700,male,2008
Chinstrap,Dream,50.9,19.1,196,3550,male,2008
"""
FEATURES = read_as({"label": "species", "numeric": ["bill_length_mm", "bill_depth_mm",
                                                    "flipper_length_mm", "body_mass_g"],
                    "categorical": ["island", "sex"], "ignored": ["year"]})


def test_clear_cases_get_their_species(pushed_run):
    import tensorflow as tf
    from components.example_gen.csv_reader import parse_csv

    model = tf.saved_model.load(str(pushed_run.version_dir))
    examples = [e.SerializeToString() for e in parse_csv("cases", CLEAR_CASES, FEATURES, ["NA"])]
    answer = model.signatures["serving_default"](examples=tf.constant(examples))
    assert [c.decode() for c in answer["class_name"].numpy()] == ["Adelie", "Gentoo", "Chinstrap"]
    by_name = model.signatures["raw_features"](
        island=tf.constant(["Biscoe"]), sex=tf.constant(["male"]),
        bill_length_mm=tf.constant([50.0]), bill_depth_mm=tf.constant([15.2]),
        flipper_length_mm=tf.constant([218.0]), body_mass_g=tf.constant([5700.0]))
    assert by_name["class_name"].numpy()[0] == b"Gentoo"
