"""Config keys renamed to what they are today still load for one release, with a warning naming
the new key (core/config/): `training.tfjob` is `training.job`, `kubeflow.night_lease` is
`kubeflow.run_lease`."""
import warnings

import pytest


def test_the_old_training_tfjob_key_loads_warns_and_gives_the_same_values(tmp_path):
    from core.config import load_config
    from tests.helpers import write_config

    job = {"workers": 3, "cpu": "2", "memory": "4Gi", "timeout_s": 7200, "max_restarts": 1,
           "runtime": "tfx-tensorflow-gpu"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new key warns of nothing
        new = load_config(write_config(tmp_path / "new", {"training.job": job}))
    with pytest.warns(FutureWarning, match=r"training\.tfjob is renamed training\.job"):
        old = load_config(write_config(tmp_path / "old", {"training.job": None,
                                                          "training.tfjob": job}))
    assert old.training.job == new.training.job
    assert old.training.job.workers == 3 and old.training.job.runtime == "tfx-tensorflow-gpu"
    assert old.training.model_dump() == new.training.model_dump()


def test_both_the_old_and_the_new_key_are_refused(tmp_path):
    from core.config import ConfigError, load_config
    from tests.helpers import write_config

    with pytest.raises(ConfigError, match=r"training.*set 'job' only: 'tfjob' is its old name"):
        load_config(write_config(tmp_path, {"training.job": {"workers": 2},
                                            "training.tfjob": {"workers": 4}}))


def test_the_old_night_lease_key_loads_warns_and_gives_the_same_values(tmp_path):
    from core.config import load_config
    from tests.helpers import write_config

    lease = {"enabled": False, "expiry_s": 200000}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = load_config(write_config(tmp_path / "new", {"kubeflow.run_lease": lease}))
    with pytest.warns(FutureWarning,
                      match=r"kubeflow\.night_lease is renamed kubeflow\.run_lease"):
        old = load_config(write_config(tmp_path / "old", {"kubeflow.run_lease": None,
                                                          "kubeflow.night_lease": lease}))
    assert old.kubeflow.run_lease == new.kubeflow.run_lease
    assert not old.kubeflow.run_lease.enabled and old.kubeflow.run_lease.expiry_s == 200000
    assert old.kubeflow.model_dump() == new.kubeflow.model_dump()


def test_both_lease_keys_are_refused(tmp_path):
    from core.config import ConfigError, load_config
    from tests.helpers import write_config

    with pytest.raises(ConfigError,
                       match=r"kubeflow.*set 'run_lease' only: 'night_lease' is its old name"):
        load_config(write_config(tmp_path, {"kubeflow.run_lease": {"enabled": True},
                                            "kubeflow.night_lease": {"enabled": False}}))
