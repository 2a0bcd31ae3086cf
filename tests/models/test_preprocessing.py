"""preprocessing_fn through real TFT: scaling, missing values, vocabularies, OOV."""
from __future__ import annotations

import numpy as np
import pytest

from tests.models.transform_rows import ROWS, raw_examples

pytestmark = pytest.mark.slow  # TensorFlow, TFT, TFMA or server work: not in make test-fast

# `transformed`: ROWS through real TFT, once per session (tests/models/conftest.py).


def column(rows, name):
    return np.array([row[name] for row in rows])


def test_numerics_are_z_scored_and_missing_values_become_the_mean(transformed):
    rows, _ = transformed
    bill = column(rows, "bill_length_mm_xf")
    present = np.array([39.1, 46.1, 50.0, 46.5, 50.0])
    expected = (present - present.mean()) / present.std()
    np.testing.assert_allclose(np.delete(bill, 1), expected, rtol=1e-4)
    assert bill[1] == 0.0  # the NA row


def test_categoricals_and_label_use_vocabularies(transformed):
    rows, output = transformed
    vocabulary = [v.decode() for v in output.vocabulary_by_name("island")]
    assert sorted(vocabulary) == ["Biscoe", "Dream", "Torgersen"]
    assert [vocabulary[i] for i in column(rows, "island_xf")] == [
        "Torgersen", "Dream", "Biscoe", "Biscoe", "Dream", "Dream"]
    assert "__missing__" in [v.decode() for v in output.vocabulary_by_name("sex")]
    species = [v.decode() for v in output.vocabulary_by_name("species")]
    assert [species[i] for i in column(rows, "species_xf")] == [
        "Adelie", "Adelie", "Gentoo", "Gentoo", "Chinstrap", "Chinstrap"]


def test_unseen_category_goes_to_an_oov_bucket_at_serving_time(transformed):
    import tensorflow as tf

    _, output = transformed
    unseen = ROWS.splitlines()[0] + "\nAdelie,Atlantis,39.1,18.7,181,3750,male,2007\n"
    parsed = tf.io.parse_example([e.SerializeToString() for e in raw_examples(unseen)],
                                 output.raw_feature_spec())
    island = output.transform_raw_features(parsed)["island_xf"].numpy()
    assert island[0] >= output.vocabulary_size_by_name("island")  # an OOV id, not an error
