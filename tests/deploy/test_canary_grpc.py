"""The canary analysis and the alerts judge gRPC traffic as they judge REST traffic, on the series
the TF Serving stand-in (devtools/tf_serving) counts for real requests of both protocols.

TF Serving 2.16.1 and 2.20.0 count a gRPC Predict/Classify/Regress in the same series as a REST
call: request_count{model_name, status} always, request_latency{model_name, API, entrypoint}
when it succeeded, API "Predict"/"Classify"/"Regress" and entrypoint "GRPC" where REST writes
"predict" and "REST" (model_servers/prediction_service_impl.cc, http_server.cc). The analysis'
inference requests are request_latency_count of the inference APIs of both protocols plus the
failed request_count: each request once, whichever protocol carried it.

Each scenario is a stable pod and a canary pod, each a REST and a gRPC stand-in sharing one
metrics registry (as `python -m devtools.tf_serving` runs them), sent real requests over loopback
(REST with `requests`, gRPC with TF Serving's own PredictionServiceStub) tick by tick; after each
tick the pods' /monitoring/prometheus/metrics bodies are read as Prometheus would scrape them and
stored at 15 s steps (promtool tsdb create-blocks-from openmetrics). Scenarios lie 20 minutes apart,
so the alert rules, which sum over every pod, see one scenario at a time at its end. The template
is queried as Argo Rollouts would (test_rollout_analysis.measure), with its own arguments.
"""

from __future__ import annotations

import contextlib
import functools
import json

import grpc
import numpy as np
import pytest
import requests

from tests.deploy import tf_serving_metrics as tfs
from tests.deploy.test_rollout_analysis import (
    analysis_template,
    measure,
    prometheus_over,
    template_args,
    verdict,
)
from tests.deploy.test_serving_artifacts import MODEL_NAME, PROMETHEUS
from tests.helpers import LazyModules, load_yaml

apis = LazyModules("tensorflow_serving.apis", "classification_pb2", "predict_pb2",
                   "prediction_service_pb2_grpc", "regression_pb2")

STEP_S = 15
TICKS = 24  # 6 minutes: the 5-minute window and a minute before it
SCENARIO_S = 20 * 60  # the next scenario's first tick: past every [5m] range of this one
START_S = 1_790_000_000
SLOW_S = 0.15  # a slow request's model time: above the 100 ms objective
MODEL_S = 0.002  # every other request's
VERSIONS = {"stable": 1717171717, "canary": 1717258117}

# Requests per tick: (REST ok, REST failing, gRPC ok, gRPC failing, gRPC slow). The stable pod
# always takes STABLE; a canary's 12 a tick make 240 in the window (min-requests: 200).
STABLE = (6, 0, 6, 0, 0)
CANARY = {
    "rest-only": (12, 0, 0, 0, 0),
    "grpc-only": (0, 0, 12, 0, 0),
    "mixed": (6, 0, 6, 0, 0),
    "rest-only-errors": (10, 2, 0, 0, 0),
    "grpc-only-errors": (0, 0, 10, 2, 0),
    "mixed-grpc-errors": (6, 0, 4, 2, 0),
    "grpc-only-slow": (0, 0, 11, 0, 1),
}
HEALTHY = {"inference-requests": "Successful", "error-ratio": "Successful",
           "p99-latency-ms": "Successful", "p99-latency-vs-stable": "Successful"}
ERRORS = {**HEALTHY, "error-ratio": "Failed"}
SLOW = {**HEALTHY, "p99-latency-ms": "Failed", "p99-latency-vs-stable": "Failed"}
EXPECTED = {"rest-only": HEALTHY, "grpc-only": HEALTHY, "mixed": HEALTHY,
            "rest-only-errors": ERRORS, "grpc-only-errors": ERRORS, "mixed-grpc-errors": ERRORS,
            "grpc-only-slow": SLOW}
# The alerts whose expression holds at the scenario's end, stable and canary together (2 of
# 24 requests a tick failing is 8 %, over ModelHighErrorRate's 5 %; 1 slow in 24 puts the P99
# in the slow bucket).
FIRING = {"rest-only-errors": {"ModelHighErrorRate"}, "grpc-only-errors": {"ModelHighErrorRate"},
          "mixed-grpc-errors": {"ModelHighErrorRate"}, "grpc-only-slow": {"ModelHighP99Latency"}}
REQUEST_ALERTS = ("ModelHighErrorRate", "ModelHighP99Latency")


def scenario_end(scenario: str) -> float:
    return START_S + list(CANARY).index(scenario) * SCENARIO_S + TICKS * STEP_S


class ModelClock:
    """The stand-ins' clock in this module (their `time`: it has the perf_counter they time
    each call with). It moves only by the model time each call spends, so the latencies the
    metrics record are the same on any machine, however busy: with wall time, a few requests
    delayed on a loaded CI machine moved a healthy canary's P99 (no timed test: tests/README.md).
    The requests are sent one at a time, so one clock serves both pods."""

    def __init__(self):
        self.now = 1.0

    def perf_counter(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


CLOCK = ModelClock()


class SlowWhenAsked:
    """The stand-in's model, with a request whose first value is 999 taking SLOW_S (a slow
    batch as the server would time it), every other MODEL_S, on CLOCK."""

    def __init__(self, model):
        self.model, self.signatures = model, model.signatures

    def run(self, signature, inputs):
        slow = any(np.asarray(v).ravel()[:1].tolist() == [999.0] for v in inputs.values())
        CLOCK.spend(SLOW_S if slow else MODEL_S)
        return self.model.run(signature, inputs)

    def predict_instances(self, *args):
        """The REST path's model call."""
        CLOCK.spend(MODEL_S)
        return self.model.predict_instances(*args)


class Pod:
    """One TF Serving pod's stand-in: REST and gRPC on loopback, one metrics registry."""

    def __init__(self, model, version: int):
        from devtools.tf_serving.grpc_stub import GrpcStub
        from devtools.tf_serving.metrics import Metrics
        from devtools.tf_serving.rest_stub import RestStub
        from devtools.tf_serving.servables import Servables

        metrics = Metrics()
        self.rest = RestStub(MODEL_NAME, model.predict_instances, versions=[version],
                             metrics=metrics)
        self.grpc = GrpcStub(Servables(MODEL_NAME, [version]), model, metrics=metrics)
        self.http = requests.Session()
        self.calls = 0

    def __enter__(self):
        self.rest.__enter__()
        self.grpc.__enter__()
        self.channel = grpc.insecure_channel(self.grpc.target)
        self.client = apis.prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        return self

    def __exit__(self, *exc):
        self.channel.close()
        self.http.close()
        self.grpc.__exit__(*exc)
        self.rest.__exit__(*exc)

    def rest_call(self, ok: bool) -> None:
        # A failing one names a version the pod does not serve: 404, NOT_FOUND.
        path = "" if ok else "/versions/7"
        response = self.http.post(f"{self.rest.url}/v1/models/{MODEL_NAME}{path}:predict",
                                  data=json.dumps({"instances": [[1.0, 2.0]]}), timeout=30)
        assert response.status_code == (200 if ok else 404), response.text

    def grpc_call(self, ok: bool = True, slow: bool = False) -> None:
        """Predict, Classify and Regress in turn; a failing Predict has an input the signature
        does not take (INVALID_ARGUMENT)."""
        import tensorflow as tf

        self.calls += 1
        kind = "Predict" if slow or not ok else ("Predict", "Classify", "Regress")[self.calls % 3]
        if kind == "Predict":
            request = apis.predict_pb2.PredictRequest()
            request.inputs["x" if ok else "z"].CopyFrom(tf.make_tensor_proto(
                np.asarray([[999.0 if slow else 1.0, 2.0]], np.float32)))
        else:
            request = (apis.classification_pb2.ClassificationRequest() if kind == "Classify"
                       else apis.regression_pb2.RegressionRequest())
            request.model_spec.signature_name = kind.lower()
            example = request.input.example_list.examples.add()
            example.features.feature["f"].float_list.value.append(0.5)
        request.model_spec.name = MODEL_NAME
        try:
            getattr(self.client, kind)(request, timeout=30)
            assert ok
        except grpc.RpcError as error:
            assert not ok and error.code() == grpc.StatusCode.INVALID_ARGUMENT, error

    def send(self, traffic: tuple) -> None:
        rest_ok, rest_failing, grpc_ok, grpc_failing, grpc_slow = traffic
        for _ in range(rest_ok):
            self.rest_call(ok=True)
        for _ in range(rest_failing):
            self.rest_call(ok=False)
        for _ in range(grpc_ok):
            self.grpc_call()
        for _ in range(grpc_failing):
            self.grpc_call(ok=False)
        for _ in range(grpc_slow):
            self.grpc_call(slow=True)

    def scrape(self) -> str:
        response = self.http.get(f"{self.rest.url}/monitoring/prometheus/metrics", timeout=30)
        response.raise_for_status()
        return response.text


def scenario_series(model, scenario: str) -> list[str]:
    """Both pods' scrapes over the scenario's ticks (each tick's requests to the stable pod, then
    the canary's), series by series in time order."""
    start = scenario_end(scenario) - TICKS * STEP_S
    by_series: dict[str, list[str]] = {}
    with contextlib.ExitStack() as stack:
        pods = []
        for role, traffic in (("stable", STABLE), ("canary", CANARY[scenario])):
            labels = {"job": "tf-serving", "instance": f"{scenario}-{role}:8501",
                      "namespace": "serving", "pod": f"tf-serving-{scenario}-{role}",
                      "rollouts_pod_template_hash": f"{scenario}-{role}",
                      "model_version": str(VERSIONS[role])}
            pods.append((stack.enter_context(Pod(model, VERSIONS[role])), traffic, labels))
        for tick in range(TICKS + 1):
            for pod, traffic, _ in pods:
                if tick:
                    pod.send(traffic)
            for pod, _, labels in pods:
                for sample in tfs.scraped_samples(pod.scrape(), labels, start + tick * STEP_S):
                    by_series.setdefault(sample.rsplit(" ", 2)[0], []).append(sample)
    return [sample for samples in by_series.values() for sample in samples]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from devtools.tf_serving.session_model import SessionModel
    from tests.serving.test_grpc_stub import _build_model

    path = tmp_path_factory.mktemp("canary-grpc") / "1"
    _build_model(path)
    return SlowWhenAsked(SessionModel(path))


@pytest.fixture(scope="module")
def prometheus(model, tmp_path_factory):
    from devtools.tf_serving import grpc_stub, rest_stub

    with pytest.MonkeyPatch.context() as patch:
        for stand_in in (grpc_stub, rest_stub):
            patch.setattr(stand_in, "time", CLOCK)
        lines = [line for scenario in CANARY for line in scenario_series(model, scenario)]
    with prometheus_over(tmp_path_factory.mktemp("prometheus"),
                         "\n".join(lines) + "\n# EOF\n") as query:
        yield query


def judged(query, scenario: str, edit=lambda promql: promql) -> tuple[dict, dict]:
    """The analysis' phases and values for a scenario's canary, its queries through `edit`."""
    template = json.loads(edit(json.dumps(analysis_template())))
    # template_args names the revisions "<scenario>-stable" and "<scenario>-canary", as here.
    return measure(functools.partial(query, at=scenario_end(scenario)), template,
                   template_args(template, scenario))


def firing(query, scenario: str, edit=lambda promql: promql) -> set[str]:
    """The request alerts whose expression returns a sample at the scenario's end."""
    rules = load_yaml((PROMETHEUS / "alerts.yml").read_text())["groups"][0]["rules"]
    return {rule["alert"] for rule in rules if rule.get("alert") in REQUEST_ALERTS
            and query(edit(rule["expr"]), at=scenario_end(scenario))["result"]}


# The inference APIs as REST alone labels them: a query written for REST traffic only.
def rest_labels_only(promql: str) -> str:
    edited = promql.replace('API=~\\"(?i)predict|classify|regress\\"',
                            'API=~\\"predict|classify|regress\\"')
    edited = edited.replace('API=~"(?i)predict|classify|regress"',
                            'API=~"predict|classify|regress"')
    assert edited != promql, "the inference API matcher was not found"
    return edited


@pytest.mark.slow
@pytest.mark.parametrize("scenario", CANARY)
def test_the_canary_is_judged_on_its_rest_and_grpc_requests(prometheus, scenario):
    phases, values = judged(prometheus, scenario)
    assert phases == EXPECTED[scenario], values
    assert firing(prometheus, scenario) == FIRING.get(scenario, set())


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["rest-only", "grpc-only", "mixed", "mixed-grpc-errors"])
def test_each_request_counts_once_whichever_protocol_carried_it(prometheus, scenario):
    """20 ticks of 12 canary requests in the 5-minute window: 240, whether REST, gRPC or both
    carried them (a query counting request_count's OK too would see about 480; one reading a
    single protocol, 0 or 120)."""
    _, values = judged(prometheus, scenario)
    assert values["inference-requests"] == [pytest.approx(20 * 12, rel=0.01)]
    failing = sum(CANARY[scenario][i] for i in (1, 3)) / 12
    assert values["error-ratio"] == [pytest.approx(failing, abs=1e-6)]


@pytest.mark.slow
def test_queries_on_rest_labels_alone_miss_a_grpc_canary(prometheus):
    """Negative control: the analysis and alerts with the inference APIs as REST names them
    (case-sensitive "predict|classify|regress") find no gRPC inference: a healthy gRPC canary
    gets no verdict, an erroring or slow one is not failed, the slow one's alert stays quiet.
    The REST canary is judged as before."""
    for scenario in ("grpc-only", "grpc-only-errors", "grpc-only-slow"):
        phases, values = judged(prometheus, scenario, rest_labels_only)
        assert verdict(phases) == "Inconclusive", (scenario, phases, values)
    assert firing(prometheus, "grpc-only-slow", rest_labels_only) == set()
    assert judged(prometheus, "rest-only-errors", rest_labels_only)[0] == ERRORS
