"""The metric names the config accepts (core/tasks.py threshold_metrics, checked on load without
TensorFlow) are names TFMA instantiates, and so are the defaults and losses the EvalConfig adds."""
from core.tasks import TASKS


def test_every_name_the_config_accepts_is_one_tfma_computes():
    from components.evaluator.eval_config import metric_problem

    names = {name for task in TASKS.values()
             for name in (*task.threshold_metrics, *task.default_metrics, task.loss)}
    assert [problem for problem in map(metric_problem, sorted(names)) if problem] == []


def test_the_check_refuses_a_name_tfma_does_not_know():
    from components.evaluator.eval_config import metric_problem

    assert "not a TFMA or Keras metric class name" in metric_problem("accuracy_of_doom")
