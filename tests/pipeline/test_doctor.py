"""pipeline.doctor: what a machine can run, against what the config asks for, with the fix."""
from __future__ import annotations

import dataclasses

import pytest

from core.config import load_config
from pipeline.doctor import (
    FAIL,
    OK,
    WARN,
    Machine,
    config_findings,
    kubeflow_storage_findings,
    machine_findings,
)
from tests.helpers import run_cli, write_config
from tests.s3_server import s3  # noqa: F401  (fixture)

CPU_ONLY = Machine(tf_version="2.16.2", build={"is_cuda_build": True, "cuda_version": "12.3",
                                               "cudnn_version": "8"},
                   keras="tf_keras 2.16.0 (Keras 2)", gpus=[], tpus=0, nccl=None,
                   xla_error=None, cpus=2, cpu_bf16=False, tf_config=None)


def gpus(*capabilities):
    return dataclasses.replace(CPU_ONLY, nccl="nvidia-nccl-cu12 2.19.3", gpus=[
        {"name": f"GPU {i}", "compute_capability": c} for i, c in enumerate(capabilities)])


def config(tmp_path, **changes):
    return load_config(write_config(tmp_path, {k.replace("__", "."): v
                                               for k, v in changes.items()}))


def failures(findings):
    return [f for f in findings if f.level == FAIL]


def test_the_bundled_config_asks_for_nothing_a_cpu_machine_lacks(tmp_path):
    assert failures(config_findings(config(tmp_path), CPU_ONLY)) == []


@pytest.mark.parametrize("changes, words", [
    ({"training__distribution_strategy": "mirrored",
      "training__collective_implementation": "nccl"}, "'nccl' and no GPU is visible"),
    ({"training__distribution_strategy": "mirrored", "training__devices": ["/gpu:0"]},
     "lists ['/gpu:0'], not visible here"),
    ({"training__jit_compile": True}, "XLA fails here"),
])
def test_what_this_machine_lacks_fails_with_the_fix(tmp_path, changes, words):
    machine = dataclasses.replace(CPU_ONLY, xla_error="InvalidArgumentError: no XLA device")
    [failure] = failures(config_findings(config(tmp_path, **changes), machine))
    assert words in failure.text and failure.fix


def test_the_same_config_passes_where_the_gpus_are(tmp_path):
    asked = config(tmp_path, training__distribution_strategy="mirrored",
                   training__collective_implementation="nccl",
                   training__devices=["/gpu:0", "/gpu:1"])
    assert failures(config_findings(asked, gpus((8, 0), (8, 0)))) == []


def test_multi_worker_needs_a_cluster_locally_but_not_when_compiled_for_kubeflow(tmp_path):
    asked = config(tmp_path, training__distribution_strategy="multi_worker_mirrored",
                   training__tfjob__workers=2)
    [failure] = failures(config_findings(asked, CPU_ONLY, "local"))
    assert "needs the cluster in TF_CONFIG" in failure.text
    assert failures(config_findings(asked, CPU_ONLY, "kubeflow")) == []


@pytest.mark.parametrize("precision, capability, level", [
    ("mixed_float16", (6, 1), WARN), ("mixed_float16", (7, 5), OK),
    ("mixed_bfloat16", (7, 5), WARN), ("mixed_bfloat16", (8, 0), OK)])
def test_mixed_precision_is_fast_only_from_its_compute_capability(tmp_path, precision,
                                                                  capability, level):
    found = {f.text.split(":")[0]: f.level for f in machine_findings(gpus(capability))
             if f.area == "precision"}
    assert found[precision] == level
    asked = config_findings(config(tmp_path, training__precision=precision), gpus(capability))
    assert [f.level for f in asked if "training.precision" in f.text] == (
        [WARN] if level == WARN else [])


def test_keras_3_fails_with_the_fix():
    keras3 = dataclasses.replace(CPU_ONLY, keras="keras 3.3.3")
    [failure] = [f for f in machine_findings(keras3) if f.area == "keras"]
    assert failure.level == FAIL and "TF_USE_LEGACY_KERAS=1" in failure.fix


def test_local_paths_that_cannot_be_used_fail(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    (tmp_path / "empty").mkdir()
    asked = config(tmp_path, runner__output_dir=str(blocker / "outputs"),
                   data__input_base=str(tmp_path / "empty"))
    texts = [f.text for f in failures(config_findings(asked, CPU_ONLY))]
    assert any("0 span folder(s)" in t for t in texts), texts
    assert any(f"{blocker} is a file, not a folder" in t for t in texts), texts


def test_s3_paths_are_checked_against_the_endpoint(tmp_path, s3, monkeypatch):  # noqa: F811
    monkeypatch.delenv("S3_ENDPOINT", raising=False)
    for name, value in s3.env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    asked = config(tmp_path, kubeflow__pipeline_root=f"s3://{s3.bucket}/root",
                   kubeflow__serving_dir="s3://no-such-bucket/serving",
                   kubeflow__object_store__endpoint=s3.endpoint)
    found = {f.text.split(" ")[0]: f for f in kubeflow_storage_findings(asked)}
    assert found["kubeflow.pipeline_root"].level == OK
    assert found["kubeflow.serving_dir"].level == WARN
    assert "not reachable from here" in found["kubeflow.serving_dir"].text


def test_this_machine_as_tensorflow_sees_it():
    import tensorflow as tf

    here = Machine.here()
    assert here.tf_version == tf.__version__
    assert here.keras.startswith("tf_keras")
    assert len(here.gpus) == len(tf.config.list_physical_devices("GPU"))


@pytest.mark.e2e
def test_the_command_exits_0_when_ready_and_2_for_a_bad_config(tmp_path):
    """(Exit 1 with the fix: the config_findings tests above, on described machines.)"""
    ready = run_cli("pipeline.doctor", "--config", str(write_config(tmp_path / "ready")))
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert "ready to run this config here" in ready.stdout
    for section in ("python:", "tensorflow:", "keras:", "gpu:", "nccl:", "xla:", "threads:",
                    "strategy:", "precision:", "storage:"):
        assert section in ready.stdout
    bad = write_config(tmp_path / "bad", {"training.precision": "float8"})
    result = run_cli("pipeline.doctor", "--config", str(bad))
    assert result.returncode == 2 and "training.precision" in result.stderr


def test_the_command_exits_1_with_the_fix_when_the_machine_lacks_what_the_config_asks(
        tmp_path, capsys):
    from pipeline.doctor import main

    nccl = write_config(tmp_path, {"training.distribution_strategy": "mirrored",
                                   "training.collective_implementation": "nccl"})
    code = main(["--config", str(nccl)])
    out = capsys.readouterr().out
    if Machine.here().gpus:  # a machine with GPUs has what this config asks for
        assert code == 0, out
    else:
        assert code == 1, out
        assert "fix: use 'auto' on CPU machines" in out and "1 problem(s)" in out
