"""`make flink-up`: a Flink session cluster on this machine that runs the pipeline's Beam stages as
a Kubernetes one does: each TaskManager with its own Beam worker pool on its own localhost.

    python -m devtools.flink_cluster up [--taskmanagers 2] [--slots 2] [--pool-path PATH]
                                        [--taskmanager-memory 4096m] ...
    python -m devtools.flink_cluster status   # what runs, where its log is
    python -m devtools.flink_cluster down     # stops what `up` started, removes what it made

`up` starts, each waited for until it answers:
1. a JobManager (StandaloneSessionClusterEntrypoint) and N TaskManagers (TaskManagerRunner) of
   Flink 1.16.3 (scripts/fetch_flink.sh: PyPI's apache-flink-libraries, sha256-pinned), on Java 17
   with the JVM and `-D` memory flags Flink's own BashJavaUtils computes, as Flink's bin/ scripts
   start them; ready once the REST API lists every TaskManager and slot;
2. per TaskManager, a Beam SDK worker pool (Beam's EXTERNAL environment) started with PATH and
   HOME alone, as a sidecar container is. As root with iproute2, each TaskManager and its pool
   share a network namespace (devtools/netns.py: a pod), so `--environment_config=localhost:50000`
   names each TaskManager's own pool, as in deploy/flink/. Elsewhere: one TaskManager and its pool
   on this machine's localhost (two TaskManagers sharing one pool stall: not a cluster's topology);
3. Beam's job server (FlinkJobServerDriver of beam-runners-flink-1.16:
   deploy/flink/job-server-pom.xml, fetched and pinned jar by jar by `make tools`) pointed at the
   JobManager.
It prints the Beam arguments for `runner.beam_args` (outputs/flink/beam_args.json too). All of it
lives in outputs/flink/ (conf/, logs/, state.json: the processes `down` stops, each checked by its
start time so that a reused pid is never signalled; network.json: the namespaces `down` removes).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import List, Optional

from devtools import netns
from devtools.beam_worker_pool import pool_environment, start_pool, worker_problem
from devtools.loopback import REPO, ServiceUnavailable, free_port, wait_until_answering
from devtools.service_up import Stack, _alive, status as recorded_status

FOLDER = REPO / "outputs" / "flink"
# Where scripts/fetch_flink.sh and scripts/fetch_jars.sh put the jars (`make tools`).
JARS = Path(os.environ.get("FLINK_LIBS", REPO / ".cache" / "flink"))
JOB_SERVER_JARS = REPO / ".cache" / "flink-job-server" / "jars"
FLINK_VERSION = re.search(r"apache-flink-libraries==([0-9.]+)", (
    REPO / "deploy" / "flink" / "flink-libraries.txt").read_text()).group(1)
JOB_SERVER_MAIN = "org.apache.beam.runners.flink.FlinkJobServerDriver"
POOL_PORT = 50000  # each pool's, in its own namespace: deploy/flink's sidecar port
# A JobManager and two TaskManagers starting on 2 busy cores (the suite's other worker training)
# took over 120 s in one CI run; a free machine takes about 20 s.
READY_TIMEOUT_S = 300.0
# Flink's flink-dist/src/main/resources/flink-conf.yaml `env.java.opts.all` (1.18's list, which
# 1.16 lacks: without sun.net.util 1.16's JobManager dies at start on Java 17 with an
# IllegalAccessError on IPAddressUtil): what Flink and Beam's Flink client need opened.
JAVA_17_OPTS = (
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED "
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED "
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED "
    "--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED "
    "--add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED "
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED "
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED "
    "--add-opens=java.base/java.text=ALL-UNNAMED --add-opens=java.base/java.time=ALL-UNNAMED "
    "--add-opens=java.base/java.util=ALL-UNNAMED "
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED "
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED "
    "--add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED").split()
# One file per process, as Flink's conf/log4j.properties (its ${sys:log.file}).
LOG4J = """rootLogger.level = INFO
rootLogger.appenderRef.file.ref = MainAppender
appender.main.name = MainAppender
appender.main.type = File
appender.main.fileName = ${sys:log.file}
appender.main.layout.type = PatternLayout
appender.main.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
"""


def flink_conf(host: str, bind: str, rest_port: int, rpc_port: int, tmp: Path, args) -> str:
    """flink-conf.yaml. Memory (README: Beam stages on Flink, measured here): Beam's portable data
    plane is gRPC in direct memory, so task off-heap (default 0) is what a 1M-row night needs
    (`OutOfMemoryError: Direct buffer memory` without it), and the bundled night's StatisticsGen
    needs more network buffers than the default ("Insufficient number of network buffers")."""
    return "\n".join([
        f"jobmanager.rpc.address: {host}", f"jobmanager.rpc.port: {rpc_port}",
        f"jobmanager.bind-host: {bind}", f"rest.address: {host}",
        # The cluster's own scratch, removed by `down`: under Flink's default (/tmp) each process
        # keeps a working folder named by its resource id (tm_taskmanager-1), every job's jars
        # in its blob cache (about 150 MB a Beam job) pile up there run after run, and a
        # TaskManager hashes all of them at start (AbstractBlobCache.checkStoredBlobsForCorruption):
        # measured here, 15 GB and 60 s of a 69 s `up`.
        f"io.tmp.dirs: {tmp}",
        f"rest.bind-address: {bind}", f"rest.port: {rest_port}",
        f"jobmanager.memory.process.size: {args.jobmanager_memory}",
        f"taskmanager.memory.process.size: {args.taskmanager_memory}",
        f"taskmanager.memory.network.min: {args.network_memory}",
        f"taskmanager.memory.network.max: {args.network_memory}",
        f"taskmanager.memory.task.off-heap.size: {args.task_off_heap}",
        # Each blocking result partition of a batch job reserves this many buffers (Flink 1.16's
        # sort-shuffle default is 512): with one TaskManager left carrying both subtasks of the
        # Evaluator's job after the other was lost, 512mb of network memory fell short
        # ("required 512, but only 465 available").
        "taskmanager.network.sort-shuffle.min-buffers: 128",
        f"taskmanager.numberOfTaskSlots: {args.slots}", "parallelism.default: 1",
        # A job's tasks on every TaskManager, not packed into the first one's slots.
        "cluster.evenly-spread-out-slots: true",
        # A lost TaskManager noticed within 10 s; a failed job re-run 3 times, 5 s apart: the
        # restarts span the heartbeat timeout, so the last one no longer counts the lost
        # TaskManager's slots (at 2 x 2 s a job killed with its TaskManager failed for good on
        # Flink 1.16, its restarts scheduled back onto the dead TaskManager).
        # `restart-strategy`, not 1.17's `restart-strategy.type`: Flink 1.16 ignores that key and
        # runs NoRestartBackoffTimeStrategy (its JobManager log says so).
        "heartbeat.interval: 2000", "heartbeat.timeout: 10000",
        "restart-strategy: fixed-delay", "restart-strategy.fixed-delay.attempts: 3",
        "restart-strategy.fixed-delay.delay: 5 s",
        # The whole job restarts on a failure: with the default region failover one lost
        # TaskManager fails tasks of many regions of a Beam job at once (Transform has dozens),
        # each counted as an attempt, and the job failed for good within 0.3 s.
        "jobmanager.execution.failover-strategy: full", ""])


def classpath() -> str:
    """lib/ as Flink's bin/config.sh builds it: the other jars sorted, flink-dist last."""
    jars = sorted(p for p in (JARS / "lib").glob("*.jar") if not p.name.startswith("flink-dist"))
    return ":".join(str(p) for p in [*jars, *sorted((JARS / "lib").glob("flink-dist-*.jar"))])


def jar_problem() -> Optional[str]:
    if not list((JARS / "lib").glob("flink-dist-*.jar")):
        return (f"no Flink jars in {JARS}: run `make tools` (scripts/fetch_flink.sh fetches "
                f"Flink {FLINK_VERSION}'s jars once)")
    if not list(JOB_SERVER_JARS.glob("beam-runners-flink-*.jar")):
        return (f"no Beam job server jars in {JOB_SERVER_JARS}: run `make tools` "
                "(scripts/fetch_jars.sh deploy/flink/job-server-pom.xml ...)")
    if shutil.which("java") is None:
        return "java not found: install a JDK 17 (scripts/install_test_tools.sh)"
    return None


def resource_params(conf: Path, which: str) -> tuple:
    """(JVM flags, `-D` flags) for a JobManager (GET_JM_RESOURCE_PARAMS) or TaskManager
    (GET_TM_RESOURCE_PARAMS) of this config, as Flink's bin/ scripts get them."""
    answer = subprocess.run(
        ["java", *JAVA_17_OPTS, "-cp", f"{JARS / 'bin' / 'bash-java-utils.jar'}:{classpath()}",
         "org.apache.flink.runtime.util.bash.BashJavaUtils", which, "--configDir", str(conf)],
        capture_output=True, text=True, timeout=60)
    results = [line.split(":", 1)[1] for line in answer.stdout.splitlines()
               if line.startswith("BASH_JAVA_UTILS_EXEC_RESULT:")]
    if answer.returncode != 0 or len(results) < 2:
        raise ServiceUnavailable(f"Flink's BashJavaUtils {which} failed: "
                                 f"{(answer.stdout + answer.stderr)[-2000:]}")
    return results[-2].split(), results[-1].split()


def overview(rest: str) -> dict:
    with urllib.request.urlopen(f"{rest}/overview", timeout=2) as answer:
        return json.loads(answer.read())


def _java(conf: Path, log: Path, jvm: List[str], main: str, dynamic: List[str]) -> List[str]:
    return ["java", *JAVA_17_OPTS, *jvm, f"-Dlog.file={log}",
            f"-Dlog4j.configurationFile=file:{conf / 'log4j.properties'}", "-cp", classpath(),
            main, "--configDir", str(conf), *dynamic]


def _answers(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


def up(folder: Path, args) -> int:
    # Before anything starts: a pool whose workers cannot start would hang every Beam stage.
    problem = jar_problem() or worker_problem(pool_environment(True, args.pool_path))
    if problem:
        raise ServiceUnavailable(problem)
    if (folder / "state.json").exists():
        raise ServiceUnavailable(f"a cluster is recorded in {folder / 'state.json'}: "
                                 "`make flink-down` first")
    began = time.monotonic()
    why_shared = netns.available()
    if why_shared and args.taskmanagers > 1:
        raise ServiceUnavailable(
            f"{args.taskmanagers} TaskManagers need a network namespace each for their worker "
            f"pools, and {why_shared}: run as root with iproute2, or `--taskmanagers 1`")
    stack = Stack(folder)
    network = None
    if not why_shared:
        network = netns.create(["jm", *(f"tm{n}" for n in range(1, args.taskmanagers + 1))])
        (folder / "network.json").write_text(json.dumps(network.as_dict()))
    # Inside its own namespace the JobManager binds everywhere (its REST handler reaches its
    # BlobServer on localhost); without namespaces, loopback only.
    host = network.address("jm") if network else "127.0.0.1"
    bind = "0.0.0.0" if network else "127.0.0.1"
    conf = folder / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    rest_port, rpc_port, job_port = free_port(), free_port(), free_port()
    tmp = (folder / "tmp").resolve()
    tmp.mkdir(exist_ok=True)
    (conf / "flink-conf.yaml").write_text(flink_conf(host, bind, rest_port, rpc_port, tmp, args))
    (conf / "log4j.properties").write_text(LOG4J)
    rest = f"http://{host}:{rest_port}"

    jm_jvm, jm_dynamic = resource_params(conf, "GET_JM_RESOURCE_PARAMS")
    jobmanager, _ = stack.spawn("jobmanager", [
        *(network.exec_prefix("jm") if network else []), *_java(
            conf, stack.logs / "jobmanager.log", jm_jvm,
            "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint",
            jm_dynamic)], url=rest)
    tm_jvm, tm_dynamic = resource_params(conf, "GET_TM_RESOURCE_PARAMS")
    started = [jobmanager]
    for number in range(1, args.taskmanagers + 1):
        name = f"taskmanager-{number}"
        prefix = network.exec_prefix(f"tm{number}") if network else []
        tm_host = network.address(f"tm{number}") if network else "127.0.0.1"
        process, _ = stack.spawn(name, [*prefix, *_java(
            conf, stack.logs / f"{name}.log", tm_jvm,
            "org.apache.flink.runtime.taskexecutor.TaskManagerRunner",
            [*tm_dynamic, "-D", f"taskmanager.resource-id={name}", "-D",
             f"taskmanager.host={tm_host}", "-D", f"taskmanager.bind-host={bind}"])],
            namespace=network.namespace(f"tm{number}") if network else None)
        started.append(process)
        pool_port = POOL_PORT if network else free_port()
        home = folder / f"pool-{number}"
        home.mkdir(exist_ok=True)
        pool_log = stack.logs / f"worker-pool-{number}.log"
        pool = start_pool(pool_port, pool_log,
                          {**pool_environment(True, args.pool_path), "HOME": str(home)},
                          prefix, check=False)  # checked above
        # group: the pool's workers are its children, in its session.
        stack.record(f"worker-pool-{number}", pool, pool_log, url=f"localhost:{pool_port}",
                     group=True)
    wait_until_answering(
        started, lambda: (overview(rest)["taskmanagers"] == args.taskmanagers
                          and overview(rest)["slots-total"] == args.taskmanagers * args.slots),
        f"the JobManager at {rest} with {args.taskmanagers} TaskManagers",
        lambda: f"(logs: {stack.logs})", READY_TIMEOUT_S, poll_s=0.5)

    job_log = stack.logs / "job-server.log"
    job_server, _ = stack.spawn("job-server", [
        "java", *JAVA_17_OPTS, "-Xmx1024m", "-cp", f"{JOB_SERVER_JARS}/*", JOB_SERVER_MAIN,
        f"--flink-master={host}:{rest_port}", "--job-host=127.0.0.1", f"--job-port={job_port}",
        "--artifact-port=0", "--expansion-port=0", f"--flink-conf-dir={conf}"],
        url=f"127.0.0.1:{job_port}")
    wait_until_answering(job_server, lambda: _answers(job_port),
                         f"Beam's job server on 127.0.0.1:{job_port}",
                         lambda: f"(log: {job_log})", READY_TIMEOUT_S, poll_s=0.5)

    flags = beam_args(job_port, f"{host}:{rest_port}", pool_port, args.taskmanagers)
    (folder / "beam_args.json").write_text(json.dumps(flags))
    topology = (f"{args.taskmanagers} TaskManagers, each with its worker pool on its own "
                "localhost (a network namespace each)" if network else
                f"1 TaskManager and its worker pool on this machine's localhost ({why_shared})")
    print(f"flink {FLINK_VERSION} session cluster up in {time.monotonic() - began:.0f} s: "
          f"{rest}, {topology}, Beam's job server 127.0.0.1:{job_port}; logs in {stack.logs}")
    print("runner.beam_args: " + json.dumps(flags))
    return 0


def beam_args(job_port: int, master: str, pool_port: int, parallelism: int) -> List[str]:
    """What runner.beam_args needs for this cluster (README: Beam stages on Flink). The job
    server already knows the JobManager; --flink_master (the same address: Beam's
    FlinkJobInvoker keeps the server's unless the pipeline names one) lets the run's pre-flight
    check probe it too (pipeline/run_bounds.py)."""
    return ["--runner=PortableRunner", f"--job_endpoint=127.0.0.1:{job_port}",
            f"--flink_master={master}",
            "--environment_type=EXTERNAL", f"--environment_config=localhost:{pool_port}",
            f"--parallelism={parallelism}"]


def down(folder: Path) -> int:
    """Stops what `up` recorded, and nothing else (the job server, the pools with their
    workers, the TaskManagers, the JobManager last), then removes its namespaces."""
    state_file, network_file = folder / "state.json", folder / "network.json"
    if not state_file.exists() and not network_file.exists():
        print(f"nothing to stop: no {state_file}")
        return 0
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    order = ["job-server", *sorted(n for n in state if n.startswith("worker-pool")),
             *sorted(n for n in state if n.startswith("taskmanager")), "jobmanager"]
    for name in order:
        entry = state.get(name)
        if entry is None or not _alive(entry):
            continue
        signal_it = os.killpg if entry.get("group") else os.kill
        signal_it(entry["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _alive(entry) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(entry):
            signal_it(entry["pid"], signal.SIGKILL)
        if entry.get("group"):  # workers that outlived their pool
            with contextlib.suppress(ProcessLookupError):
                os.killpg(entry["pid"], signal.SIGKILL)
        print(f"  stopped {name} (pid {entry['pid']})")
    state_file.unlink(missing_ok=True)
    shutil.rmtree(folder / "tmp", ignore_errors=True)  # its jobs' jars, GBs; the logs stay
    if network_file.exists():
        netns.delete(json.loads(network_file.read_text()))
        network_file.unlink()
        print("  removed its network namespaces and bridge")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("--folder", type=Path, default=FOLDER)
    parser.add_argument("--taskmanagers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=2, help="task slots per TaskManager")
    parser.add_argument("--pool-path", help="the worker pools' PATH (their `python` must "
                        "import Beam and this project; default: the venv's bin, then the "
                        "system's)")
    # Defaults that held for the bundled nights and for 1M rows (README: Beam stages on Flink).
    parser.add_argument("--jobmanager-memory", default="1024m")
    parser.add_argument("--taskmanager-memory", default="4096m")
    parser.add_argument("--network-memory", default="512mb")
    parser.add_argument("--task-off-heap", default="1024m")
    args = parser.parse_args(argv)
    folder = args.folder.resolve()
    try:
        if args.action == "up":
            return up(folder, args)
        return down(folder) if args.action == "down" else recorded_status(folder)
    except (ServiceUnavailable, OSError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        if args.action == "up" and "make flink-down" not in str(error):
            down(folder)
        return 1
    except BaseException:
        if args.action == "up":  # nothing half-started is left running
            down(folder)
        raise


if __name__ == "__main__":
    raise SystemExit(main())
