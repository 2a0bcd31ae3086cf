"""The metric names the config accepts (core/config.py TASK_METRICS, checked on load without
TensorFlow) are names TFMA instantiates, and so are the defaults and losses the EvalConfig adds."""
from core.config import TASK_METRICS


def test_every_name_the_config_accepts_is_one_tfma_computes():
    from components.evaluator.eval_config import DEFAULT_METRICS, LOSSES, metric_problem

    names = {name for names in TASK_METRICS.values() for name in names}
    names |= {name for names in DEFAULT_METRICS.values() for name in names} | set(LOSSES.values())
    assert [problem for problem in map(metric_problem, sorted(names)) if problem] == []


def test_the_check_refuses_a_name_tfma_does_not_know():
    from components.evaluator.eval_config import metric_problem

    assert "not a TFMA or Keras metric class name" in metric_problem("accuracy_of_doom")
