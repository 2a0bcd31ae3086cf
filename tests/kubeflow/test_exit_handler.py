"""The night's exit step (pipeline/kubeflow/client/exit_handler.py, step/run_exit.py,
step/step_records.py) and how the emulated backend runs an exit handler (devtools/kfp_backend:
argocompiler/dag.go makes an ALL_UPSTREAM_TASKS_COMPLETED task the `exit` hook of what it
depends on; driver/resolve.go gives its TASK_FINAL_STATUS from 2.14.0; the 2.5.0 compiler refuses
one).

The spec's shape is checked on literal dicts; the scheduler on shell tasks; the exit step on
records written here and a webhook on loopback. An emulated night with a failing step is
test_s3_night.py's anomalous night.
"""
from __future__ import annotations

import json

import pytest

from core.config import load_config
from core.nodes import RUN_EXIT
from devtools.kfp_backend import Runner, SpecError, TaskFailed
from pipeline.kubeflow.client import exit_handler

from pipeline.kubeflow.step import run_exit, step_records
from tests.helpers import load_yaml, write_config
from tests.kubeflow.test_conformance import pods, run_record, shell_spec  # noqa: F401
from tests.pipeline.test_notify import webhook  # noqa: F401  (fixture)


def tfx_like_spec() -> dict:
    """Three root tasks as TFX writes them: Gen, Stats after it, Report after both."""
    container = {"image": "img:1", "command": ["python", "-m", "step"]}
    names = ("Gen", "Stats", "Report")
    return {
        "pipelineInfo": {"name": "mini"}, "schemaVersion": "2.1.0",
        "components": {n: {"executorLabel": f"{n}_executor"} for n in names},
        "deploymentSpec": {"executors": {f"{n}_executor": {"container": container}
                                         for n in names}},
        "root": {"dag": {"tasks": {
            "Gen": {"taskInfo": {"name": "Gen"}, "componentRef": {"name": "Gen"}},
            "Stats": {"taskInfo": {"name": "Stats"}, "componentRef": {"name": "Stats"},
                      "dependentTasks": ["Gen"]},
            "Report": {"taskInfo": {"name": "Report"}, "componentRef": {"name": "Report"},
                       "dependentTasks": ["Gen", "Stats"]}}}}}


# -- the compiled shape: kfp's dsl.ExitHandler (sdk/python/kfp/compiler/pipeline_spec_builder.py)

def test_every_task_moves_into_the_exit_handler_and_the_exit_step_follows_it_whatever_happens():
    spec = exit_handler.with_exit_step(tfx_like_spec(), "img:2", "{}", final_status=True)
    root = spec["root"]["dag"]["tasks"]
    assert set(root) == {"exit-handler-1", RUN_EXIT}
    assert root["exit-handler-1"] == {"taskInfo": {"name": "exit-handler-1"},
                                      "componentRef": {"name": "comp-exit-handler-1"}}
    guarded = spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    assert guarded == tfx_like_spec()["root"]["dag"]["tasks"]
    exit_task = root[RUN_EXIT]
    assert exit_task["dependentTasks"] == ["exit-handler-1"]
    assert exit_task["triggerPolicy"] == {"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"}
    assert exit_task["inputs"]["parameters"]["final_status"] == {
        "taskFinalStatus": {"producerTask": "exit-handler-1"}}
    assert exit_task["inputs"]["parameters"]["guarded_tasks"] == {
        "runtimeValue": {"constant": ["Gen", "Report", "Stats"]}}
    component = spec["components"][RUN_EXIT]
    assert component["inputDefinitions"]["parameters"]["final_status"] == {
        "parameterType": "TASK_FINAL_STATUS", "isOptional": True}
    assert spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"][
        "command"] == ["python", "-m", "pipeline.kubeflow.step.run_exit"]
    assert exit_handler.exit_handler_problems(spec) == []


def test_the_shape_is_the_one_the_kfp_sdk_compiles_for_dsl_exit_handler(tmp_path):
    """The installed kfp SDK's own compile of `with dsl.ExitHandler(exit_task):`, field by field
    against ours (the names but the exit task's, which are the SDK's)."""
    from kfp import compiler, dsl
    from kfp.dsl import PipelineTaskFinalStatus

    @dsl.container_component
    def work():
        return dsl.ContainerSpec(image="img:1", command=["true"])

    def notice(final_status):
        return dsl.ContainerSpec(image="img:1", command=["echo", final_status])

    # The SDK reads the type from the annotation (this module's are strings: __future__).
    notice.__annotations__ = {"final_status": PipelineTaskFinalStatus}
    notice = dsl.container_component(notice)

    @dsl.pipeline(name="p")
    def pipeline():
        with dsl.ExitHandler(notice()):
            work()

    compiler.Compiler().compile(pipeline, str(tmp_path / "p.yaml"))
    sdk = load_yaml((tmp_path / "p.yaml").read_text())
    ours = exit_handler.with_exit_step(tfx_like_spec(), "img:2", "{}", final_status=True)
    sdk_root, our_root = sdk["root"]["dag"]["tasks"], ours["root"]["dag"]["tasks"]
    assert sdk_root["exit-handler-1"] == our_root["exit-handler-1"]
    assert "dag" in sdk["components"]["comp-exit-handler-1"]
    for key in ("dependentTasks", "triggerPolicy"):
        assert sdk_root["notice"][key] == our_root[RUN_EXIT][key]
    assert (sdk_root["notice"]["inputs"]["parameters"]["final_status"]
            == our_root[RUN_EXIT]["inputs"]["parameters"]["final_status"])
    assert (sdk["components"]["comp-notice"]["inputDefinitions"]["parameters"]["final_status"]
            == ours["components"][RUN_EXIT]["inputDefinitions"]["parameters"]["final_status"])


def test_a_spec_for_2_5_has_no_final_status_and_one_without_the_policy_is_a_problem():
    spec = exit_handler.with_exit_step(tfx_like_spec(), "img:2", "{}", final_status=False)
    assert "final_status" not in spec["root"]["dag"]["tasks"][RUN_EXIT]["inputs"]["parameters"]
    assert exit_handler.uses_final_status("2.5.0") is False
    assert exit_handler.uses_final_status("2.14.0") is True
    del spec["root"]["dag"]["tasks"][RUN_EXIT]["triggerPolicy"]
    assert exit_handler.exit_handler_problems(spec) == [
        "RunExit has no triggerPolicy ALL_UPSTREAM_TASKS_COMPLETED: it would not run after "
        "a failure"]


def test_the_webhook_secret_reaches_only_the_exit_steps_env(tmp_path):
    config = load_config(write_config(tmp_path, {"notify.kubeflow_secret": "night-webhook",
                                                 "notify.webhook_env": "HOOK"}))
    platform = exit_handler.with_webhook_secret(
        {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {
            "Gen_executor": {"secretAsEnv": [{"secretName": "s3"}]},
            "RunExit_executor": {"secretAsEnv": [{"secretName": "s3"}]}}}}}}, config)
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert executors["Gen_executor"] == {"secretAsEnv": [{"secretName": "s3"}]}
    assert executors["RunExit_executor"]["secretAsEnv"][1] == {
        "secretName": "night-webhook", "keyToEnv": [{"secretKey": "url", "envVar": "HOOK"}]}
    unset = load_config(write_config(tmp_path / "unset", {}))
    assert exit_handler.with_webhook_secret(None, unset) is None


# -- the emulated backend: argocompiler/dag.go exit hooks, Argo's failFast, driver/resolve.go

def guarded_shells(scripts: dict, needs: dict, exit_script: str, policy: bool = True,
                   final_status: bool = False) -> dict:
    """shell_spec's tasks inside exit-handler-1, and an exit task X after it."""
    spec = shell_spec({**scripts, "X": exit_script}, {})
    inner = {n: t for n, t in spec["root"]["dag"]["tasks"].items() if n != "X"}
    for name, deps in needs.items():
        inner[name]["dependentTasks"] = deps
    spec["components"]["comp-exit-handler-1"] = {"dag": {"tasks": inner}}
    exit_task = {"taskInfo": {"name": "X"}, "componentRef": {"name": "X"},
                 "dependentTasks": ["exit-handler-1"]}
    if policy:
        exit_task["triggerPolicy"] = {"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"}
    if final_status:
        exit_task["inputs"] = {"parameters": {"status": {
            "taskFinalStatus": {"producerTask": "exit-handler-1"}}}}
        spec["components"]["X"]["inputDefinitions"] = {"parameters": {"status": {
            "parameterType": "TASK_FINAL_STATUS", "isOptional": True}}}
        spec["deploymentSpec"]["executors"]["X_executor"]["container"]["command"] = [
            "sh", "-c", exit_script, "x", "{{$.inputs.parameters['status']}}"]
    spec["root"]["dag"]["tasks"] = {
        "exit-handler-1": {"taskInfo": {"name": "exit-handler-1"},
                           "componentRef": {"name": "comp-exit-handler-1"}},
        "X": exit_task}
    return spec


def test_the_exit_task_runs_after_a_failing_task_and_the_run_still_fails(tmp_path, pods):  # noqa: F811,E501
    image, marks = pods
    spec = guarded_shells({"A": "exit 3", "B": f"touch {marks}/B"}, {"B": ["A"]},
                          f"touch {marks}/X")
    runner = Runner(spec, str(tmp_path / "root"), tmp_path / "state", image=image)
    with pytest.raises(TaskFailed, match="task A exited with 3"):
        runner.run()
    assert run_record(runner) == {"A": "failed", "B": "not run", "X": "ran"}
    assert sorted(p.name for p in marks.iterdir()) == ["X"]


def test_without_the_trigger_policy_the_exit_task_does_not_run_after_a_failure(tmp_path, pods):  # noqa: F811,E501
    """The negative control: an ordinary task after the DAG needs it Succeeded (dag.go
    depends)."""
    image, marks = pods
    spec = guarded_shells({"A": "exit 3"}, {}, f"touch {marks}/X", policy=False)
    runner = Runner(spec, str(tmp_path / "root"), tmp_path / "state", image=image)
    with pytest.raises(TaskFailed, match="task A exited with 3"):
        runner.run()
    assert run_record(runner) == {"A": "failed", "X": "not run"}
    assert list(marks.iterdir()) == []


def test_the_exit_task_runs_last_after_a_night_that_succeeded(tmp_path, pods):  # noqa: F811
    image, marks = pods
    spec = guarded_shells({"A": f"touch {marks}/A", "B": f"test -e {marks}/A && touch "
                           f"{marks}/B"}, {"B": ["A"]}, f"test -e {marks}/B && touch {marks}/X")
    runner = Runner(spec, str(tmp_path / "root"), tmp_path / "state", image=image)
    assert runner.run().names("ran") == ["A", "B", "X"]


@pytest.mark.parametrize("failing", [True, False])
def test_from_2_14_the_exit_task_gets_the_dags_final_status_as_the_driver_gives_it(
        tmp_path, pods, failing):  # noqa: F811
    image, marks = pods
    spec = guarded_shells({"A": "exit 3" if failing else "true"}, {},
                          f'printf %s "$1" > {marks}/status', final_status=True)
    runner = Runner(spec, str(tmp_path / "root"), tmp_path / "state", image=image,
                    version="2.17.0")
    if failing:
        with pytest.raises(TaskFailed):
            runner.run(run_id="0123456789")
    else:
        runner.run(run_id="0123456789")
    assert json.loads((marks / "status").read_text()) == {
        "state": "FAILED" if failing else "COMPLETE", "pipelineTaskName": "exit-handler-1",
        "pipelineJobResourceName": "shells-01234567", "error": {}}


@pytest.mark.parametrize("tag", ["2.4.1", "2.5.0"])
def test_before_2_14_a_spec_with_a_final_status_is_refused_before_any_step(tmp_path, pods, tag):  # noqa: F811,E501
    image, marks = pods
    spec = guarded_shells({"A": f"touch {marks}/A"}, {}, "true", final_status=True)
    runner = Runner(spec, str(tmp_path / "root"), tmp_path / "state", image=image, version=tag)
    with pytest.raises(SpecError, match="task final status not supported yet"):
        runner.run()
    assert list(marks.iterdir()) == []


# -- the exit step: step records -> the outcome, the report, the message

def test_the_outcome_names_the_failed_step_else_the_one_killed_while_it_ran():
    guarded = ["Gen", "Stats", "Train"]
    done = {"state": "succeeded"}
    failed = run_exit.judge({"Gen": done, "Stats": {"state": "failed", "error": "E: bad"}},
                              guarded)
    assert (failed.words, failed.error, failed.ran) == ("failed at Stats", "E: bad", ["Gen"])
    stopped = run_exit.judge({"Gen": done, "Stats": {"state": "running"}}, guarded)
    assert stopped.words == "stopped during Stats"
    # Cached steps write no record: without a final status, nothing failed is a completed night.
    assert run_exit.judge({"Gen": done}, guarded).words == "completed"
    lost = run_exit.judge({"Gen": done}, guarded, {"state": "FAILED"})
    assert lost.words == "failed" and "Stats, Train never started" in lost.error
    assert run_exit.judge({}, guarded, {"state": "COMPLETE"}).words == "completed"


def test_the_run_root_and_task_are_read_from_an_output_uri():
    executor_input = {"outputs": {"artifacts": {"html": {"artifacts": [
        {"uri": "s3://b/pipelines/mini/run-7/RunExit/5f0c/html"}]}}}}
    assert step_records.place(executor_input) == ("s3://b/pipelines/mini/run-7", "RunExit")
    # A gate has no output of its own: the backend's executor-logs (2.16.1+: its URI gets -0).
    logs_only = {"outputs": {"artifacts": {"executor-logs": {"artifacts": [
        {"uri": "s3://b/pipelines/mini/run-7/AnomalyGate/9a1e/executor-logs-0"}]}}}}
    assert step_records.place(logs_only) == ("s3://b/pipelines/mini/run-7", "AnomalyGate")
    assert step_records.place({"outputs": {"artifacts": {}}}) is None  # a gate on 2.4.1


def exit_input(tmp_path, config, guarded, final_status=None) -> str:
    run_root = tmp_path / "root" / "mini" / "run-7"
    outputs = {key: {"artifacts": [{"uri": f"{run_root}/RunExit/u1/{key}"}]}
               for key in ("html", "markdown")}
    values = {"config": json.dumps(config.model_dump(mode="json")), "guarded_tasks": guarded}
    if final_status is not None:
        values["final_status"] = final_status
    return json.dumps({"inputs": {"parameterValues": values}, "outputs": {
        "artifacts": outputs}}), run_root


def test_a_failed_night_gets_its_report_and_one_message_on_the_webhook(
        tmp_path, monkeypatch, webhook):  # noqa: F811
    import tensorflow as tf

    url, handler = webhook
    config = load_config(write_config(tmp_path, {"notify.kubeflow_secret": "night-webhook",
                                                 "notify.webhook_env": "TEST_NIGHT_HOOK"}))
    monkeypatch.setenv("TEST_NIGHT_HOOK", url)
    executor_input, run_root = exit_input(tmp_path, config, ["Gen", "Stats"])
    step_records.write(tf.io.gfile, str(run_root), "Gen", "succeeded")
    step_records.write(tf.io.gfile, str(run_root), "Stats", "failed",
                       "ValueError: the schema has no feature x")
    assert run_exit.main(["--executor_input", executor_input]) == 0
    markdown = (run_root / "RunExit" / "u1" / "markdown").read_text()
    assert "the run stopped at Stats" in markdown
    assert "ValueError: the schema has no feature x" in markdown
    [(path, content_type, body)] = handler.received
    assert path == "/services/T0/B0/secret" and content_type == "application/json"
    text = json.loads(body)["text"]
    assert text.splitlines()[0] == (f"Pipeline '{config.pipeline_name}' on Kubeflow: nightly "
                                    "run failed at Stats")
    assert "run: Kubeflow run run-7" in text
    assert "last error: ValueError: the schema has no feature x" in text


def test_a_completed_night_posts_nothing_and_no_secret_posts_nothing(
        tmp_path, monkeypatch, webhook, capsys):  # noqa: F811
    import tensorflow as tf

    url, handler = webhook
    config = load_config(write_config(tmp_path, {"notify.kubeflow_secret": "night-webhook",
                                                 "notify.webhook_env": "TEST_NIGHT_HOOK"}))
    monkeypatch.setenv("TEST_NIGHT_HOOK", url)
    executor_input, run_root = exit_input(tmp_path, config, ["Gen"], {"state": "COMPLETE"})
    step_records.write(tf.io.gfile, str(run_root), "Gen", "succeeded")
    assert run_exit.main(["--executor_input", executor_input]) == 0
    assert "The night completed" in (run_root / "RunExit" / "u1" / "markdown").read_text()
    no_secret = load_config(write_config(tmp_path / "plain", {}))
    executor_input, run_root = exit_input(tmp_path / "plain", no_secret, ["Gen"])
    step_records.write(tf.io.gfile, str(run_root), "Gen", "running")
    assert run_exit.main(["--executor_input", executor_input]) == 0
    assert "nothing posted" in capsys.readouterr().out
    assert handler.received == []


def test_a_secret_named_but_no_url_in_its_variable_fails_the_exit_step(
        tmp_path, monkeypatch, capsys):
    import tensorflow as tf

    config = load_config(write_config(tmp_path, {"notify.kubeflow_secret": "night-webhook",
                                                 "notify.webhook_env": "TEST_NIGHT_HOOK"}))
    monkeypatch.delenv("TEST_NIGHT_HOOK", raising=False)
    executor_input, run_root = exit_input(tmp_path, config, ["Gen"])
    step_records.write(tf.io.gfile, str(run_root), "Gen", "failed", "E")
    assert run_exit.main(["--executor_input", executor_input]) == 2
    assert "error: no webhook URL: environment variable TEST_NIGHT_HOOK" in capsys.readouterr().err


@pytest.mark.parametrize("fails", [True, False])
def test_the_entrypoint_records_a_step_as_running_then_failed_with_its_error_or_succeeded(
        tmp_path, monkeypatch, fails):
    """pipeline/kubeflow/step/entrypoint.py main around a stand-in for TFX's module: the record is
    in the run's folder named by the backend's executor-logs (the step declares no output)."""
    import sys
    import types

    from pipeline.kubeflow.step import entrypoint


    seen = []
    run_root = tmp_path / "root" / "mini" / "run-7"

    def module_main(argv):
        seen.append(json.loads((run_root / ".steps" / "Gate.json").read_text())["state"])
        if fails:
            raise RuntimeError("the data does not match the schema:\n  split 'train': bad")

    module = types.ModuleType("fake_tfx_entry")
    from absl import flags

    module.main, module.__file__ = module_main, "fake"
    module._parse_flags = lambda argv: flags.FLAGS(argv, known_only=True)
    monkeypatch.setitem(sys.modules, "fake_tfx_entry", module)
    monkeypatch.setattr(entrypoint, "TFX_MODULES", ("fake_tfx_entry",))
    monkeypatch.setattr("core.storage.exit_now", lambda code: None)
    executor_input = {"inputs": {"parameterValues": {}, "artifacts": {}}, "outputs": {
        "artifacts": {"executor-logs": {"artifacts": [
            {"uri": f"{run_root}/Gate/u1/executor-logs", "type": {"schemaTitle": "x"}}]}},
        "outputFile": str(tmp_path / "out.json")}}
    # What TFX's module writes there (stood in for): the ExecutorOutput.
    (tmp_path / "out.json").write_text(json.dumps({"artifacts": {"anomalies": {"artifacts": [
        {"uri": "s3://b/a", "metadata": {"span": 3.0, "split_names": "[\"train\"]"}}]}}}))
    code = entrypoint.main([entrypoint.DECLARED_OUTPUTS_FLAG, "[]", "fake_tfx_entry",
                            entrypoint.INVOCATION_FLAG, json.dumps(executor_input),
                            entrypoint.INPUTS_SPEC_FLAG, "{}"])
    record = json.loads((run_root / ".steps" / "Gate.json").read_text())
    assert seen == ["running"]
    assert (code, record["state"]) == ((1, "failed") if fails else (0, "succeeded"))
    assert record["error"] == ("RuntimeError: the data does not match the schema:\n  split "
                               "'train': bad" if fails else None)
    assert record["outputs"] == ({} if fails else {"anomalies": {
        "uri": "s3://b/a", "metadata": {"span": 3.0, "split_names": "[\"train\"]"}}})


def test_a_stopped_nights_exit_step_gives_its_runs_lease_back(tmp_path, capsys):
    """A stopped run's steps never reach the RunReport that releases the run lease: the exit
    step, compiled with the release role, gives it back (only its own run's)."""
    import tensorflow as tf

    from core import lease_stores, run_lease

    config = load_config(write_config(tmp_path, {}))
    executor_input, run_root = exit_input(tmp_path, config, ["Gen", "Trainer"])
    store = lease_stores.open_store(run_lease.lease_uri(str(run_root)))
    run_lease.take(store, str(run_root), 3600)
    step_records.write(tf.io.gfile, str(run_root), "Gen", "succeeded")
    step_records.write(tf.io.gfile, str(run_root), "Trainer", "running")  # its pod was killed
    spec = exit_handler.with_exit_step(tfx_like_spec(), "img", "{}", False,
                                       run_lease_expiry_s=3600)
    args = spec["deploymentSpec"]["executors"][exit_handler.EXIT_EXECUTOR]["container"]["args"]
    lease_args = args[:args.index("--executor_input")]  # the flag first, as every step's
    assert lease_args[0] == "--night_lease"
    assert run_exit.main([*lease_args, "--executor_input", executor_input]) == 0
    assert "stopped during Trainer" in capsys.readouterr().out
    with pytest.raises(run_lease.LeaseError, match="released"):
        run_lease.require(store, str(run_root))
    # Without the lease flag (a spec compiled with the lease off) nothing is touched.
    other = tmp_path / "other"
    executor_input, run_root = exit_input(other, config, ["Gen"])
    store = lease_stores.open_store(run_lease.lease_uri(str(run_root)))
    run_lease.take(store, str(run_root), 3600)
    assert run_exit.main(["--executor_input", executor_input]) == 0
    run_lease.require(store, str(run_root))  # still held
