"""The night's exit step: every compiled step runs inside an exit handler, and one step after it
runs whatever their outcome (pipeline/kubeflow/step/run_exit.py: the report of a failed or stopped
run, and the webhook message).

The shape is the kfp SDK's `with dsl.ExitHandler(exit_task):` (kfp 2.x sdk/python/kfp/compiler/
pipeline_spec_builder.py build_exit_handler_groups / _build_dag_outputs, compiler_utils.py): the
guarded tasks move into a DAG component `comp-exit-handler-1`, the root runs it as task
`exit-handler-1`, and the exit task sits in the root with `dependentTasks: [exit-handler-1]` and
`triggerPolicy: {strategy: ALL_UPSTREAM_TASKS_COMPLETED}`.

How the backend runs it (backend/src/v2/compiler/argocompiler/dag.go DAG, common.go addExitTask,
the same at 2.5.0 and 2.17.0): a task with that strategy becomes the Argo template
`exit-hook-root-<task>`, set as the `exit` lifecycle hook of each task it depends on, so it runs
when `exit-handler-1` ends, succeeded or failed. A stopped run (the UI's Terminate, or
`kfp.Client().terminate_run`): the API server sets the Workflow's activeDeadlineSeconds to 0
(apiserver/resource/resource_manager.go TerminateWorkflow, common/util/execution_spec.go
GetTerminatePatch); Argo then kills the running steps' pods and fails the pending ones ("Step
exceeded its deadline"), but pods of an exit handler are exempt from the workflow deadline
(argo-workflows v3.5.14 and v4.0.5: workflow/controller/exec_control.go, workflowpod.go
createWorkflowPod `opts.onExitPod`, operator.go failNodesWithoutCreatedPodsAfterDeadlineOrShutdown
`IsPartOfExitHandler`), so the exit step still runs. It does not run when the Workflow is deleted,
nor under Argo's own `argo terminate` (shutdown strategy Terminate), which KFP never sets.

No `PipelineTaskFinalStatus` input: the 2.5.0 compiler refuses every task that has one ("task final
status not supported yet", dag.go addImplicitDependencies, to 2.5.0; 2.14.0's driver resolves it,
driver/resolve.go), and it would say only the DAG's state, not which step failed. The exit step
reads instead the step records our entrypoint writes (pipeline/kubeflow/step/step_records.py).

The RunReport step stays where it is, inside the handler: it takes nine artifacts of the guarded
steps as inputs, and a task outside the handler can read none (the SDK refuses an exit task with
upstream data; the backend's hook resolves inputs of tasks that may never have run).
"""
from __future__ import annotations

import copy
import json

from core import kfp_backends
from core.config import PipelineConfig
from core.nodes import RUN_EXIT
from pipeline.kubeflow.step.run_lease_step import FLAG as LEASE_FLAG

EXIT_HANDLER_TASK = "exit-handler-1"
EXIT_HANDLER_COMPONENT = "comp-exit-handler-1"
ALL_COMPLETED = "ALL_UPSTREAM_TASKS_COMPLETED"
EXIT_MODULE = "pipeline.kubeflow.step.run_exit"
EXIT_EXECUTOR = f"{RUN_EXIT}_executor"
# The exit step's outputs, typed as the KFP UI's viewers want them (spec.py UI_TYPES).
EXIT_OUTPUTS = {"html": "system.HTML", "markdown": "system.Markdown"}


def with_exit_step(spec: dict, image: str, config_json: str, final_status: bool,
                   run_lease_expiry_s: int | None = None) -> dict:
    """A copy of spec whose root tasks run inside `exit-handler-1`, and the exit step after it.
    config_json: the config the step reads (the cluster's paths, as the RunReport's);
    final_status: give it the DAG's PipelineTaskFinalStatus (2.14.0+: uses_final_status);
    run_lease_expiry_s: under the run lease, the exit step gives back its run's lease (a
    stopped run's steps never reach the RunReport that does; run_lease_step.py `release`)."""
    spec = copy.deepcopy(spec)
    root = spec["root"]
    guarded = root["dag"]["tasks"]
    if EXIT_HANDLER_TASK in guarded or EXIT_HANDLER_COMPONENT in spec["components"]:
        raise ValueError("the spec already has an exit handler")
    for name, task in guarded.items():
        for source in task.get("inputs", {}).get("parameters", {}).values():
            if "componentInputParameter" in source:
                # The sub-DAG would need it as an input of its own (the SDK passes it down).
                raise ValueError(f"task {name} reads pipeline parameter "
                                 f"{source['componentInputParameter']}: not passed into the "
                                 "exit handler")
    spec["components"][EXIT_HANDLER_COMPONENT] = {"dag": {"tasks": guarded}}
    spec["components"][RUN_EXIT] = {
        "executorLabel": EXIT_EXECUTOR,
        "inputDefinitions": {"parameters": {
            "config": {"parameterType": "STRING"},
            "guarded_tasks": {"parameterType": "LIST"},
            # As the SDK declares a PipelineTaskFinalStatus (compiler_test.py
            # test_can_use_task_final_status): optional, typed TASK_FINAL_STATUS.
            **({"final_status": {"parameterType": "TASK_FINAL_STATUS", "isOptional": True}}
               if final_status else {})}},
        "outputDefinitions": {"artifacts": {
            key: {"artifactType": {"schemaTitle": title, "schemaVersion": "0.0.1"}}
            for key, title in EXIT_OUTPUTS.items()}}}
    spec["deploymentSpec"]["executors"][EXIT_EXECUTOR] = {"container": {
        "image": image, "command": ["python", "-m", EXIT_MODULE],
        "args": [*_lease_args(run_lease_expiry_s), "--executor_input", "{{$}}"]}}
    root["dag"] = {"tasks": {
        EXIT_HANDLER_TASK: {"taskInfo": {"name": EXIT_HANDLER_TASK},
                            "componentRef": {"name": EXIT_HANDLER_COMPONENT}},
        RUN_EXIT: {
            "taskInfo": {"name": RUN_EXIT}, "componentRef": {"name": RUN_EXIT},
            "dependentTasks": [EXIT_HANDLER_TASK],
            "triggerPolicy": {"strategy": ALL_COMPLETED},
            "inputs": {"parameters": {
                "config": {"runtimeValue": {"constant": config_json}},
                "guarded_tasks": {"runtimeValue": {"constant": sorted(guarded)}},
                **({"final_status": {"taskFinalStatus": {"producerTask": EXIT_HANDLER_TASK}}}
                   if final_status else {})}},
            # Each run's outcome is its own.
            "cachingOptions": {"enableCache": False}}}}
    return spec


def _lease_args(expiry_s: int | None) -> list:
    if expiry_s is None:
        return []
    return [LEASE_FLAG, json.dumps({"role": "release", "task": RUN_EXIT, "expiry_s": expiry_s},
                                   sort_keys=True)]


def uses_final_status(backend_version: str) -> bool:
    """KFP compiles a TASK_FINAL_STATUS input from 2.14.0 (to 2.5.0 it refuses the run)."""
    return kfp_backends.parse(backend_version) >= (2, 14, 0)


def exit_handler_problems(spec: dict) -> list[str]:
    """What keeps spec's exit step from running whatever the outcome; empty when nothing."""
    tasks = spec.get("root", {}).get("dag", {}).get("tasks", {})
    exit_task = tasks.get(RUN_EXIT)
    if exit_task is None:
        return [f"no {RUN_EXIT} task in the root DAG"]
    problems = []
    if exit_task.get("triggerPolicy", {}).get("strategy") != ALL_COMPLETED:
        problems.append(f"{RUN_EXIT} has no triggerPolicy {ALL_COMPLETED}: it would not run "
                        "after a failure")
    if exit_task.get("dependentTasks") != [EXIT_HANDLER_TASK]:
        problems.append(f"{RUN_EXIT} must depend on {EXIT_HANDLER_TASK} alone (the backend "
                        "hooks it on each task it depends on)")
    if set(tasks) != {EXIT_HANDLER_TASK, RUN_EXIT}:
        problems.append(f"root tasks {sorted(set(tasks) - {EXIT_HANDLER_TASK, RUN_EXIT})} "
                        "are outside the exit handler")
    return problems


def with_webhook_secret(platform: dict | None, config: PipelineConfig) -> dict | None:
    """The PlatformSpec with the webhook's Secret as the exit step's env (kubernetes_platform.py's
    form); unchanged without notify.kubeflow_secret."""
    notify = config.notify
    if notify.kubeflow_secret is None:
        return platform
    platform = copy.deepcopy(platform) if platform else {"platforms": {"kubernetes": {
        "deploymentSpec": {"executors": {}}}}}
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    entry = executors.setdefault(EXIT_EXECUTOR, {})
    entry.setdefault("secretAsEnv", []).append({
        "secretName": notify.kubeflow_secret,
        "keyToEnv": [{"secretKey": notify.kubeflow_secret_key, "envVar": notify.webhook_env}]})
    return platform


def exit_config(report_config_json: str) -> str:
    """The exit step's config: the RunReport's, without a local webhook file (on the cluster
    the URL is the Secret's variable)."""
    data = json.loads(report_config_json)
    data["notify"]["webhook_file"] = None
    return json.dumps(data, sort_keys=True)
