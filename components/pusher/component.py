"""The Pusher component: TFX's, with the atomic copy of executor.py.

A subclass with its own EXECUTOR_SPEC, as TFX asks ("customize component directly":
tfx/components/pusher/component.py logs that `custom_executor_spec` is deprecated, a warning a
user's console would show at every run and compile). Same spec, inputs, outputs and node id
(`Pusher`, core/nodes.py) as TFX's.
"""
from __future__ import annotations

from tfx.components.pusher.component import Pusher
from tfx.dsl.components.base import executor_spec

from components.pusher.executor import Executor


class AtomicPusher(Pusher):
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
