# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters site.yml's fast path is given its inputs by (the controller's half of node_converged)."""

from __future__ import annotations

import functools
import os
import typing as t

import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.plugin_utils._lazy_engine import Engine

_inputs = Engine("_node._inputs")

# plugins/filter/node_converged.py -> the collection's root
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


@functools.lru_cache(maxsize=4)
def _collection_digest(root: str) -> str:
    return _inputs.collection_digest(root)


def node_converged_options(roles: t.Sequence[str]) -> t.List[str]:
    """The option names of each role's main entry point (meta/argument_specs.yml), sorted."""
    names: t.Set[str] = set()
    for role in roles:
        path = os.path.join(_ROOT, "roles", role, "meta", "argument_specs.yml")
        try:
            with open(path, encoding="utf-8") as handle:
                # libyaml where it is there: this runs once for each node (a worker of its own)
                specs = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            names.update(specs["argument_specs"]["main"]["options"])
        except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
            raise AnsibleFilterError(f"node_converged_options: {path}: no main entry point's options ({exc})") from exc
    return sorted(names)


def node_converged_inputs(values: t.Mapping[str, t.Any], wheelhouse: str = "") -> str:
    """values | node_converged_inputs(wheelhouse) -> sha256 of the values, this collection's
    bytes and the controller's wheelhouse listing (a missing folder is one more input: the
    wheelhouse role refuses it where it is used)."""
    try:
        return _inputs.inputs_digest(values, _collection_digest(_ROOT), wheelhouse)
    except OSError as exc:
        raise AnsibleFilterError(f"node_converged_inputs: {exc}") from exc


class FilterModule:
    """gpuserve.vllm filters for site.yml's fast path."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"node_converged_options": node_converged_options,
                "node_converged_inputs": node_converged_inputs}
