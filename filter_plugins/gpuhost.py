"""Controller-side judgement of gpuhost facts: the roles' `gpuhost_evaluate` filter.

The logic is the Python package's (gpuhost.controls), so the CLI, the roles and the
tests judge a host the same way.
"""
from __future__ import annotations

from gpuhost.controls import evaluate


def _plain(value):
    """Ansible 2.19 hands filters tagged containers; the evaluator wants plain ones."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def gpuhost_evaluate(facts, settings):
    return evaluate(_plain(facts), _plain(settings))


class FilterModule:
    def filters(self):
        return {"gpuhost_evaluate": gpuhost_evaluate}
