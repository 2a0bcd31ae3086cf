"""core/cli.py: every CLI that reads a config ends on one it cannot load the same way: its message
on stderr after "error: " (the updater's a log line, no prefix), exit status 2, before any work."""
from __future__ import annotations

import importlib

import pytest

from core.cli import REFUSED

# module, the arguments besides --config, the prefix of its message
CLIS = [
    ("pipeline.run", [], "error: "),
    ("pipeline.doctor", [], "error: "),
    ("pipeline.schema", [], "error: "),
    ("pipeline.predict", ["--csv", "rows.csv", "--url", "http://127.0.0.1:9"], "error: "),
    ("pipeline.notify", ["--unit", "u.service"], "error: "),
    ("pipeline.release", [], "error: "),
    ("pipeline.report.__main__", [], "error: "),
    ("service.updater", [], ""),
    ("service.endpoint.__main__", [], "error: "),
]


@pytest.mark.parametrize("module, extra, prefix", CLIS, ids=[c[0] for c in CLIS])
def test_a_config_that_does_not_load_is_refused_with_status_2(tmp_path, capsys, module, extra,
                                                               prefix):
    missing = tmp_path / "missing.yaml"
    main = importlib.import_module(module).main
    assert main(["--config", str(missing), *extra]) == REFUSED == 2
    err = capsys.readouterr().err
    assert err.startswith(prefix) and str(missing) in err, err
