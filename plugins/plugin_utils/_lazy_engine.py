# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters' engines, imported where a filter first uses one, not when its file loads.

ansible-core finds a collection's filter by loading every file of the collection's
plugins/filter (ansible.plugins.loader.Jinja2Loader.get_with_context), in the worker process
forked for each task, at that worker's first use of any of them. Engines imported at the top of
those files made every task that used any gpuserve filter import all of them: about 0.12 s of
controller CPU a task (benchmarks/bench_filter_load.py).
"""

from __future__ import annotations

import importlib
import typing as t

_MODULE_UTILS = "ansible_collections.gpuserve.vllm.plugins.module_utils"


class Engine:
    """A module of plugins/module_utils, imported at the first read of one of its names.

    `vp = Engine("_vllm._nodeplan")` at a filter file's top, then `vp.plan(...)` in a filter.
    """

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = f"{_MODULE_UTILS}.{name}"

    def __getattr__(self, attr: str) -> t.Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"Engine({self._name!r})"
