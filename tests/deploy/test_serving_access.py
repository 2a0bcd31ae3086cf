"""Who reaches TF Serving (issue 42, item 6), checked on the manifests as written: its
NetworkPolicy admits only its clients' pods (the recommend endpoint among them, once renamed for
the recommender) on its ports and Prometheus on the REST port; the NGINX variant adds the ingress
controller on the REST port; the canary Ingress is TLS only, internal, authenticated and passes
predictions only. Each check also runs on a broken copy that it must reject."""
from __future__ import annotations

import copy
import re

import pytest

from tests.deploy.test_rollout import VARIANTS, docs
from tests.deploy.test_serving_artifacts import K8S, MODEL_NAME as M, load_yaml_docs, rename_tool
from tests.deploy.test_service_artifacts import find, load_cluster_config
from tests.deploy.test_service_artifacts import as_written as service_objects
from tests.deploy.test_service_artifacts import cluster_config_text, _url_port
from tests.helpers import REPO, load_yaml

CLIENT_LABEL = "tf-serving/client"
PROMETHEUS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
              "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
INGRESS_NGINX = {"namespaceSelector": {"matchLabels": {
    "kubernetes.io/metadata.name": "ingress-nginx"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "ingress-nginx"}}}
# What a client outside may call, and what it must not reach (TF Serving's REST API).
PREDICT = ("/v1/models/{m}:predict", "/v1/models/{m}/versions/3:predict")
NOT_PUBLIC = ("/v1/models/{m}", "/v1/models/{m}/metadata", "/v1/models/{m}/versions/3",
              "/v1/models/{m}/versions/3/metadata", "/v1/models/{m}:classify",
              "/v1/models/{m}:regress", "/v1/models/{m}2:predict", "/v1/models/{m}:predictx",
              "/monitoring/prometheus/metrics", "/v1/models/other:predict", "/")


def _ports(rule: dict) -> set:
    return {p["port"] for p in rule.get("ports", [])}


def policy_problems(policy: dict, deployment: dict, service_name: str) -> list[str]:
    """TF Serving's own NetworkPolicy: its pods, its clients on its ports, Prometheus on REST."""
    found = []
    spec = policy["spec"]
    if spec["podSelector"]["matchLabels"] != deployment["spec"]["selector"]["matchLabels"]:
        found.append("selects other pods than TF Serving's")
    if "Ingress" not in spec["policyTypes"]:
        found.append("does not restrict ingress")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    rules = spec.get("ingress", [])
    for rule in rules:
        if not rule.get("from"):
            found.append(f"a rule admits every source on {sorted(_ports(rule))}")
        if not rule.get("ports"):
            found.append("a rule admits every port")
    clients = [r for r in rules if r.get("from") and r["from"][0].get("podSelector", {}).get(
        "matchLabels") == {CLIENT_LABEL: service_name} and "namespaceSelector" not in r["from"][0]]
    if [_ports(r) for r in clients] != [{ports["http"], ports["grpc"]}]:
        found.append(f"no rule admits pods labelled {CLIENT_LABEL}: {service_name} on "
                     f"{sorted(ports.values())}")
    scrape = [r for r in rules if r.get("from") == [PROMETHEUS]]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    if [_ports(r) for r in scrape] != [{int(annotations["prometheus.io/port"])}]:
        found.append("Prometheus not admitted on the scrape port "
                     f"{annotations['prometheus.io/port']} alone")
    if len(rules) != len(clients) + len(scrape):
        found.append(f"{len(rules) - len(clients) - len(scrape)} more rule(s) than clients and "
                     "Prometheus")
    return found


def ingress_problems(ingress: dict, model: str) -> list[str]:
    found = []
    annotations = ingress["metadata"].get("annotations", {})
    hosts = {r["host"] for r in ingress["spec"]["rules"]}
    tls_hosts = {h for t in ingress["spec"].get("tls", []) if t.get("secretName")
                 for h in t["hosts"]}
    if not hosts <= tls_hosts:
        found.append(f"hosts {sorted(hosts - tls_hosts)} without TLS (a secretName)")
    if annotations.get("nginx.ingress.kubernetes.io/force-ssl-redirect") != "true":
        found.append("plain HTTP is not redirected")
    if not annotations.get("nginx.ingress.kubernetes.io/whitelist-source-range"):
        found.append("not internal: no whitelist-source-range")
    basic = (annotations.get("nginx.ingress.kubernetes.io/auth-type") == "basic"
             and annotations.get("nginx.ingress.kubernetes.io/auth-secret"))
    if not (basic or annotations.get("nginx.ingress.kubernetes.io/auth-url")):
        found.append("not authenticated: neither basic auth with a Secret nor an auth-url")
    regex = annotations.get("nginx.ingress.kubernetes.io/use-regex") == "true"
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            # How ingress-nginx matches it: a case-insensitive regex anchored at the start with
            # use-regex, else a prefix.
            def matches(url, p=path["path"]):
                return (re.match(p, url, re.I) is not None) if regex else url.startswith(p)
            for url in (u.format(m=model) for u in PREDICT):
                if not matches(url):
                    found.append(f"{path['path']} does not pass {url}")
            for url in (u.format(m=model) for u in NOT_PUBLIC):
                if matches(url):
                    found.append(f"{path['path']} publishes {url}")
    return found


def _serving(kind: str, name: str = None) -> dict:
    objects = [d for p in (K8S / "common").glob("*.yaml") if p.name != "kustomization.yaml"
               for d in load_yaml_docs(p)] + load_yaml_docs(K8S / "deployment.yaml")
    return next(d for d in objects if d["kind"] == kind
                and (name is None or d["metadata"]["name"] == name))


def test_only_clients_and_prometheus_reach_tf_serving():
    policy, deployment = _serving("NetworkPolicy"), _serving("Deployment")
    service = _serving("Service")["metadata"]["name"]
    assert policy_problems(policy, deployment, service) == []
    # The same policy (in ../common) covers every canary variant's Rollout pods.
    for variant, root in VARIANTS.items():
        found = docs(root)
        rollout = next(d for d in found if d["kind"] == "Rollout")
        assert policy in [d for d in found if d["kind"] == "NetworkPolicy"], variant
        assert policy_problems(policy, rollout, service) == [], variant


@pytest.mark.parametrize("edit, expected", [
    (lambda p: p["spec"]["ingress"][0].pop("from"), "a rule admits every source on [8500, 8501]"),
    (lambda p: p["spec"]["ingress"][1].pop("ports"), "a rule admits every port"),
    (lambda p: p["spec"]["ingress"][1]["ports"].append({"port": 8500, "protocol": "TCP"}),
     "Prometheus not admitted on the scrape port 8501 alone"),
    (lambda p: p["spec"]["ingress"].append({"from": [{"namespaceSelector": {}}],
                                            "ports": [{"port": 8501}]}),
     "1 more rule(s) than clients and Prometheus"),
    (lambda p: p["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"].update(
        {CLIENT_LABEL: "anyone"}), "no rule admits pods labelled tf-serving/client: "
     f"tf-serving-{M} on [8500, 8501]"),
], ids=["any-source", "any-port", "prometheus-grpc", "extra-rule", "client-label"])
def test_policy_check_catches_an_opening(edit, expected):
    policy = copy.deepcopy(_serving("NetworkPolicy"))
    edit(policy)
    assert expected in policy_problems(policy, _serving("Deployment"),
                                       _serving("Service")["metadata"]["name"])


def test_the_recommend_endpoint_is_tf_servings_client(tmp_path):
    """deploy/serving renamed for the recommender (make deploy-names) admits the endpoint's pods
    on the port of the service config's tf_serving.url."""
    from core.config import load_config

    new = load_config(REPO / "configs" / "recommender.yaml").serving.model_name
    old = rename_tool.current_name()
    policy = load_yaml(rename_tool.rename_text(
        (K8S / "common" / "networkpolicy.yaml").read_text(), old, new))
    objects = service_objects()
    config = load_cluster_config(cluster_config_text(objects), tmp_path)
    labels = find(objects, "Deployment", "recommend-endpoint")["spec"]["template"]["metadata"][
        "labels"]
    admitted = [r for r in policy["spec"]["ingress"] for peer in r["from"]
                if "namespaceSelector" not in peer
                and set(peer["podSelector"]["matchLabels"].items()) <= set(labels.items())]
    assert admitted and _url_port(config.tf_serving.url) in _ports(admitted[0]), (labels, policy)
    # The updater is no client.
    updater = find(objects, "Deployment", "history-updater")["spec"]["template"]["metadata"][
        "labels"]
    assert CLIENT_LABEL not in updater


def test_the_nginx_variant_admits_its_controller_on_rest_only():
    found = docs(VARIANTS["nginx"])
    extra = [d for d in found if d["kind"] == "NetworkPolicy"
             and d["metadata"]["name"] != _serving("NetworkPolicy")["metadata"]["name"]]
    rollout = next(d for d in found if d["kind"] == "Rollout")
    (policy,) = extra
    assert policy["spec"]["podSelector"]["matchLabels"] == rollout["spec"]["selector"][
        "matchLabels"]
    assert [(r["from"], _ports(r)) for r in policy["spec"]["ingress"]] == [([INGRESS_NGINX],
                                                                          {8501})]
    for variant in ("istio", "replicas"):  # no ingress controller there
        assert [d["metadata"]["name"] for d in docs(VARIANTS[variant])
                if d["kind"] == "NetworkPolicy"] == [_serving("NetworkPolicy")["metadata"]["name"]]


def _ingress() -> dict:
    return next(d for d in docs(VARIANTS["nginx"]) if d["kind"] == "Ingress")


def test_the_canary_ingress_is_tls_internal_authenticated_and_predict_only():
    assert ingress_problems(_ingress(), rename_tool.current_name()) == []


def test_the_renamed_ingress_passes_the_new_models_predictions_only(tmp_path):
    copy_dir = tmp_path / "serving"
    rename_tool.rename("recommender", K8S.parent, copy_dir)
    ingress = next(d for d in load_yaml_docs(copy_dir / "k8s" / "rollout" / "nginx" /
                                             "ingress.yaml"))
    assert ingress_problems(ingress, "recommender") == []


def _annotation(name, value=None):
    def edit(ingress):
        annotations = ingress["metadata"]["annotations"]
        annotations.pop(f"nginx.ingress.kubernetes.io/{name}")
        if value is not None:
            annotations.update(value)
    return edit


def _path(path, path_type="Prefix"):
    def edit(ingress):
        ingress["spec"]["rules"][0]["http"]["paths"][0].update(path=path, pathType=path_type)
    return edit


@pytest.mark.parametrize("edit, expected", [
    (lambda i: i["spec"].pop("tls"), "hosts ['tf-serving.example.com'] without TLS (a secretName)"),
    (_annotation("force-ssl-redirect"), "plain HTTP is not redirected"),
    (_annotation("whitelist-source-range"), "not internal: no whitelist-source-range"),
    (_annotation("auth-secret"),
     "not authenticated: neither basic auth with a Secret nor an auth-url"),
    (_path(f"/v1/models/{M}"), f"/v1/models/{M} publishes /v1/models/{M}/metadata"),
    (_path(f"/v1/models/{M}.*:predict", "ImplementationSpecific"),
     f"/v1/models/{M}.*:predict publishes /v1/models/{M}2:predict"),
    (_path(f"/v1/models/{M}:predict", "ImplementationSpecific"),
     f"/v1/models/{M}:predict publishes /v1/models/{M}:predictx"),
], ids=["no-tls", "no-redirect", "not-internal", "no-auth", "old-prefix", "loose-regex",
        "unanchored"])
def test_ingress_check_catches_an_opening(edit, expected):
    ingress = _ingress()
    edit(ingress)
    assert expected in ingress_problems(ingress, M)
