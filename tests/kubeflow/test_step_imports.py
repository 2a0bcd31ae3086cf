"""What a light Kubeflow step has imported when its executor's Do starts (issue 32): not Beam,
TFT, nor TFDV's or TFMA's whole packages. Each is a fresh process of the compiled spec's own
command for that task, started through devtools/step_probe.py (which records sys.modules at Do)
by the local KFP backend's launcher from the step image (devtools/local_image.py), on an
ExecutorInput built here from the spec's declared
inputs and outputs. Not timed: the start-up figures are bench/step_startup.py's. A module-level
import of a heavy library in a light step's path (our entrypoint, run_executor, a component's
executor.py, what they import) fails here, naming the step and the library.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import REPO, compile_for_local_backend, load_yaml

pytestmark = pytest.mark.e2e  # fresh interpreters that import TensorFlow: ~10 s of CPU each
LIGHT = ("ImportSchemaGen", "AnomalyGate", "DriftGate", "SkewGate", "ServingBaseline", "Pusher",
         "RunReport", "Release")
# The canary night: every light step of the bundled one, and the release step after the Pusher,
# whose status the run report then reads too.
CANARY = {"serving.release": "canary", "serving.namespace": "serving"}
PROBE = REPO / "devtools" / "step_probe.py"


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    folder = tmp_path_factory.mktemp("step_imports")
    _, _, path = compile_for_local_backend(folder, CANARY)
    return folder, load_yaml(path.read_text())


def executor_input(spec: dict, task: str, root: Path) -> dict:
    """The task's ExecutorInput as a 2.17.0 driver gives it, each artifact at a URI under
    root; the parameters are the task's constants."""
    # Every step sits in the exit handler's sub-DAG (pipeline/kubeflow/client/exit_handler.py).
    node = spec["components"]["comp-exit-handler-1"]["dag"]["tasks"][task]
    component = spec["components"][node["componentRef"]["name"]]

    def artifacts(side: str, definitions: dict) -> dict:
        return {key: {"artifacts": [{"name": key, "uri": str(root / side / key), "metadata": {},
                                     "type": declared["artifactType"]}]}
                for key, declared in definitions.get("artifacts", {}).items()}

    parameters = {key: value["runtimeValue"]["constant"]
                  for key, value in node.get("inputs", {}).get("parameters", {}).items()
                  if "runtimeValue" in value}
    return {"inputs": {"artifacts": artifacts("in", component.get("inputDefinitions", {})),
                       "parameterValues": parameters},
            "outputs": {"artifacts": artifacts("out", component.get("outputDefinitions", {})),
                        "parameters": {}, "outputFile": str(root / "output_metadata.json")}}


@pytest.fixture(scope="module")
def imported_at_do(spec, step_image):
    """{task: the modules its fresh process had imported when Do started}, in the image."""
    from devtools.kfp_backend import Runner, TaskFailed

    folder, compiled = spec
    found = {}
    for task in LIGHT:
        runner = Runner(compiled, str(folder / "root"), folder / "state" / task,
                        image=step_image)
        # The launcher runs each step through run_measured (devtools/kfp_backend/launcher.py).
        run = runner.pod.run_measured
        record = folder / f"{task}.json"

        def probed(argv, work, env, log, run=run, record=record):
            assert argv[:2] == ["python", "-m"], argv
            return run(["python", str(PROBE), str(record), *argv[2:]], work, env, log)

        runner.pod.run_measured = probed
        try:  # the executor may refuse these hand-made inputs: what it imported is recorded
            runner.run_step(task, executor_input(compiled, task, folder / "artifacts" / task))
        except TaskFailed:
            pass
        assert record.exists(), f"{task}: its executor's Do never started (log in {folder})"
        found[task] = json.loads(record.read_text())["imported_at_do"]
    return found


@pytest.mark.parametrize("task", LIGHT)
def test_a_light_step_imports_no_heavy_library_before_its_do(imported_at_do, task):
    from devtools.step_probe import heavy_imports

    modules = imported_at_do[task]
    assert "tensorflow" in modules  # the probe saw a real step (TFX's artifacts import TF)
    assert heavy_imports(modules) == [], f"{task} imported them before its Do started"


def test_the_probe_sees_a_heavy_import_where_there_is_one(spec, step_image):
    """Negative control: StatisticsGen's executor imports TFDV and Beam; the same probe on
    its own command says so."""
    from devtools.kfp_backend import Runner, TaskFailed
    from devtools.step_probe import heavy_imports

    folder, compiled = spec
    runner = Runner(compiled, str(folder / "root"), folder / "state" / "StatisticsGen",
                    image=step_image)
    run, record = runner.pod.run_measured, folder / "StatisticsGen.json"
    runner.pod.run_measured = lambda argv, work, env, log: run(
        ["python", str(PROBE), str(record), *argv[2:]], work, env, log)
    try:
        runner.run_step("StatisticsGen", executor_input(compiled, "StatisticsGen",
                                                        folder / "artifacts" / "StatisticsGen"))
    except TaskFailed:
        pass
    modules = json.loads(record.read_text())["imported_at_do"]
    assert {"apache_beam", "tensorflow_data_validation"} <= set(heavy_imports(modules))
