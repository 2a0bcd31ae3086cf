"""serving.release: canary end to end on the local runner: the real pipeline on the bundled data,
the Kubernetes API a fake on loopback (tests/pipeline/test_release.py: token, the release Role,
the Rollout CRD schema) reached through a kube config, as on a developer's machine."""
from __future__ import annotations

import os
import threading

import pytest

from tests.helpers import dump_yaml, run_cli, write_config
from tests.pipeline.test_release import (NAMESPACE, ROLLOUT_NAME, TOKEN, FakeKubernetes,
                                         bundled_rollout, crd_errors, rbac, served_version)

pytestmark = pytest.mark.e2e


def test_a_canary_run_releases_what_it_pushed_and_an_unchanged_rerun_nothing(tmp_path):
    from core.config import load_config

    server = FakeKubernetes(bundled_rollout("unset", {"phase": "Healthy", "stableRS": "a",
                                                      "currentPodHash": "a"}), rbac()[0])
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(dump_yaml({
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server.url}}],
        "users": [{"name": "u", "user": {"token": TOKEN}}]}))
    env = {"KUBECONFIG": str(kubeconfig), "KUBERNETES_SERVICE_HOST": None}
    config = write_config(tmp_path, {"serving.release": "canary",
                                     "serving.namespace": NAMESPACE})
    try:
        first = run_cli("pipeline.run", "--config", str(config), env=env)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        pushed = sorted(os.listdir(load_config(config).model_base_path))
        assert served_version(server) == pushed[-1]
        assert crd_errors(server.objects[(NAMESPACE, "rollouts", ROLLOUT_NAME)]) == []
        # ServingBaseline read the Rollout (nothing promoted yet: no baseline); Release read it
        # and patched it; the summary read what serves now.
        assert [verb for verb, _, _ in server.requests] == ["get", "get", "patch", "get"]
        assert "  baseline:   none serving yet; absolute thresholds only" in first.stdout
        assert (f"  release:    {ROLLOUT_NAME}: version {pushed[-1]} released as the canary "
                "(was unset)") in first.stdout
        server.requests.clear()
        again = run_cli("pipeline.run", "--config", str(config), env=env)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert "  ran:        -" in again.stdout
        # Nothing released again: only the summary asked what serves.
        assert [verb for verb, _, _ in server.requests] == ["get"]
        assert "(from the cache)" in next(line for line in again.stdout.splitlines()
                                          if line.startswith("  release:"))
    finally:
        server.shutdown()
        server.server_close()
