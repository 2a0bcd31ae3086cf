"""core/rollout.py's kube config reading (the local runner's way to the Kubernetes API)."""
from __future__ import annotations

import base64

import pytest

from core.rollout import Cluster, ReleaseError

from tests.helpers import dump_yaml


def _write(path, cluster, user):
    path.write_text(dump_yaml({
        "apiVersion": "v1", "kind": "Config", "current-context": "b",
        "contexts": [{"name": "a", "context": {"cluster": "other", "user": "other"}},
                     {"name": "b", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}]}))
    return path


def test_the_current_context_with_a_token_file_and_embedded_certificates(tmp_path):
    (tmp_path / "token").write_text("abc\n")
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    cluster = Cluster.from_kubeconfig(_write(
        tmp_path / "config",
        {"server": "https://api:6443",
         "certificate-authority-data": base64.b64encode(pem.encode()).decode()},
        {"tokenFile": "token", "client-certificate-data": base64.b64encode(b"C").decode(),
         "client-key-data": base64.b64encode(b"K").decode()}))
    assert (cluster.server, cluster.token, cluster.ca_data) == ("https://api:6443", "abc", pem)
    assert (cluster.client_cert, cluster.client_key, cluster.insecure) == ("C", "K", False)


@pytest.mark.parametrize("cluster, user, words", [
    ({"server": "https://api"}, {"tokenFile": "absent"}, "absent"),
    ({"server": "https://api", "certificate-authority-data": "%%%"}, {"token": "t"}, "config"),
    ({}, {"token": "t"}, "has no server"),
    ({"server": "https://api"}, {"auth-provider": {"name": "gcp"}}, "create token"),
])
def test_what_it_cannot_use_is_a_release_error_that_names_it(tmp_path, cluster, user, words):
    with pytest.raises(ReleaseError, match=words):
        Cluster.from_kubeconfig(_write(tmp_path / "config", cluster, user))
