"""The fake Kubernetes API of tests/pipeline/test_release.py, for the canary release steps'
tests here (components/release, components/serving_baseline)."""
from tests.pipeline.test_release import fake  # noqa: F401  (a fixture)
