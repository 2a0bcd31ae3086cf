"""The config-typed CSV reader: null markers, declared types, and errors that say where."""
from __future__ import annotations

import pytest

from components.csv_example_gen import DataError, files_in_window, parse_csv

FEATURES = {"label": "species", "numeric": ["bill_length_mm", "body_mass_g"],
            "categorical": ["island"], "ignored": ["year"]}
HEADER = "species,island,bill_length_mm,body_mass_g,year\n"


def examples(text: str):
    return list(parse_csv("f.csv", text, FEATURES, ["NA", ""]))


def test_null_markers_are_missing_and_numerics_stay_numeric():
    [full, partial] = examples(HEADER + "Adelie,Dream,39.1,3750,2007\nGentoo,Biscoe,NA,,2008\n")
    assert full.features.feature["bill_length_mm"].float_list.value == [pytest.approx(39.1)]
    assert full.features.feature["island"].bytes_list.value == [b"Dream"]
    assert "year" not in full.features.feature  # ignored columns are dropped
    assert "bill_length_mm" not in partial.features.feature
    assert "body_mass_g" not in partial.features.feature
    assert partial.features.feature["species"].bytes_list.value == [b"Gentoo"]


def test_text_in_a_numeric_column_names_file_line_column_and_value():
    with pytest.raises(DataError, match=r"f\.csv, line 3, column 'body_mass_g': 'heavy' is not "
                                        r"a number.*null_markers"):
        examples(HEADER + "Adelie,Dream,39.1,3750,2007\nAdelie,Dream,39.1,heavy,2007\n")


def test_missing_and_unexpected_columns():
    with pytest.raises(DataError, match=r"missing column\(s\) \['body_mass_g'\]"):
        examples("species,island,bill_length_mm,year\nAdelie,Dream,39.1,2007\n")
    with pytest.raises(DataError, match=r"unexpected column\(s\) \['colour'\].*features"):
        examples(HEADER.strip() + ",colour\nAdelie,Dream,39.1,3750,2007,blue\n")


@pytest.mark.parametrize("text, words", [("", "is empty"), ("\n", "is empty"),
                                         (HEADER, "has a header but no rows")])
def test_empty_files(text, words):
    with pytest.raises(DataError, match=words):
        examples(text)


def test_ragged_row():
    with pytest.raises(DataError, match="line 2: 3 cells where the header has 5"):
        examples(HEADER + "Adelie,Dream,39.1\n")


def test_window_takes_the_newest_spans_up_to_the_current_one(tmp_path):
    for day in ("20240101", "20240102", "20240103", "20240104"):
        (tmp_path / f"span-{day}").mkdir()
        (tmp_path / f"span-{day}" / "rows.csv").write_text(HEADER)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "rows.csv").write_text(HEADER)
    pattern = "span-{YYYY}{MM}{DD}/*.csv"
    jan3 = 19725  # days from 1970-01-01 to 2024-01-03
    window = files_in_window(str(tmp_path), pattern, jan3, 2)
    assert [p.split("/")[-2] for files in window.values() for p in files] == [
        "span-20240102", "span-20240103"]
    assert len(files_in_window(str(tmp_path), pattern, jan3 + 10, 10)) == 4
