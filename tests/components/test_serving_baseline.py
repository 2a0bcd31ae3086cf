"""ServingBaseline's choice of version: the one TF Serving's default policy (latest) serves."""
from __future__ import annotations


def baseline():
    """Imported when a test runs, not at collection (tests/README.md)."""
    import components.serving_baseline.component

    return components.serving_baseline.component


def _version(base, name, complete=True):
    folder = base / name
    folder.mkdir(parents=True)
    if complete:
        (folder / "saved_model.pb").write_bytes(b"")
    return folder


def test_the_highest_number_wins_not_the_newest_name_or_string_order(tmp_path):
    for name in ("9", "10", "2"):
        _version(tmp_path, name)
    assert baseline().latest_version(str(tmp_path)) == "10"  # "9" > "10" as strings


def test_folders_that_are_not_numbers_are_not_versions(tmp_path):
    _version(tmp_path, "3")
    _version(tmp_path, "99-tmp")
    _version(tmp_path, "backup")
    _version(tmp_path, "1e9")
    assert baseline().latest_version(str(tmp_path)) == "3"


def test_a_version_without_saved_model_pb_is_not_served_yet(tmp_path):
    # The Pusher copies saved_model.pb last: a version without it is still being written.
    _version(tmp_path, "5")
    _version(tmp_path, "7", complete=False)
    assert baseline().latest_version(str(tmp_path)) == "5"


def test_nothing_serves_without_a_complete_version_or_a_folder(tmp_path):
    assert baseline().latest_version(str(tmp_path / "absent")) is None
    _version(tmp_path, "7", complete=False)
    _version(tmp_path, "notes")
    assert baseline().latest_version(str(tmp_path)) is None
