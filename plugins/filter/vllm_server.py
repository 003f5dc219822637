# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters the vllm_server role renders its unit and env file with, and checks its inputs by.

Quoting for systemd is easy to get subtly wrong in Jinja (`$`, `%`, quotes and backslashes
inside the speculative-config JSON), and so are address and range tests; these filters do it
in tested Python instead.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.plugin_utils._lazy_engine import Engine

_unit_boundary = Engine("_vllm._unit_boundary")
_unit_hardening = Engine("_vllm._unit_hardening")
_net = Engine("_vllm._net")
_ranges = Engine("_vllm._ranges")
_server = Engine("_vllm._server")


def _wrap(func: t.Callable[..., t.Any]) -> t.Callable[..., t.Any]:
    def filter_func(*args: t.Any, **kwargs: t.Any) -> t.Any:
        try:
            return func(*args, **kwargs)
        except _server.ServerConfigError as exc:
            raise AnsibleFilterError(f"{func.__name__}: {exc}") from exc

    filter_func.__name__ = func.__name__
    filter_func.__doc__ = func.__doc__
    return filter_func


def vllm_serve_argv(options: t.Mapping[str, t.Any], executable: str, model: str,
                    extra_flags: t.Mapping[str, t.Any] | None = None) -> list[str]:
    """options | vllm_serve_argv(executable, model, extra_flags) -> argv list."""
    return _server.serve_argv(executable, model, options, extra_flags)


def vllm_speculative_config(model: str | None, method: str | None, num_speculative_tokens: t.Any,
                            draft_tensor_parallel_size: t.Any = None,
                            extra: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any] | None:
    """drafter_path | vllm_speculative_config(method, n, draft_tp, extra) -> dict or None."""
    return _server.speculative_config(method, model, num_speculative_tokens, draft_tensor_parallel_size, extra)


def systemd_exec_line(argv: t.Sequence[t.Any]) -> str:
    """argv | systemd_exec_line -> the ExecStart= value (first item: the program's absolute path)."""
    return _server.systemd_exec_line(argv)


def systemd_env_lines(env: t.Mapping[str, t.Any]) -> list[str]:
    """env | systemd_env_lines -> `NAME="value"` lines, sorted by name; None values left out."""
    return _server.systemd_env_lines(env)


def vllm_is_loopback(host: str) -> bool:
    """host | vllm_is_loopback: binding it exposes the server to this machine only."""
    return _net.is_loopback(host)


def vllm_bare_host(host: str) -> str:
    """host | vllm_bare_host: without spaces and IPv6 brackets ('[::1]' -> '::1')."""
    return _net.bare_host(host)


def vllm_server_range_problems(values: t.Mapping[str, t.Any]) -> list[str]:
    """values | vllm_server_range_problems -> one sentence per value outside its range."""
    return _ranges.range_problems(values)


def systemd_unit_directives(base: t.Sequence[t.Mapping[str, t.Any]], extra: t.Mapping[str, t.Any],
                            variable: str, gpu: bool = True) -> list[str]:
    """base | systemd_unit_directives(extra, variable, gpu) -> the unit's lines (refusals raise)."""
    try:
        return _unit_hardening.unit_lines(base, extra, variable, gpu)
    except _unit_hardening.DirectiveError as exc:
        raise AnsibleFilterError(f"systemd_unit_directives: {exc}") from exc


def systemd_unit_properties(base: t.Sequence[t.Mapping[str, t.Any]], extra: t.Mapping[str, t.Any],
                            variable: str, gpu: bool = True) -> dict[str, t.Any]:
    """base | systemd_unit_properties(extra, variable, gpu) -> systemd-run properties."""
    try:
        return _unit_hardening.properties(base, extra, variable, gpu)
    except _unit_hardening.DirectiveError as exc:
        raise AnsibleFilterError(f"systemd_unit_properties: {exc}") from exc


def vllm_unit_boundary_id(environment: t.Sequence[str], unit_extra: t.Mapping[str, t.Any] | None = None) -> str:
    """env_lines | vllm_unit_boundary_id(unit_extra) -> the id a read's boundary.id has when it
    judged this environment (only the loader variables and unit_extra go in, never a secret)."""
    return _unit_boundary.judged_id(environment, unit_extra or {})


class FilterModule:
    """gpuserve.vllm filters for rendering vLLM's systemd unit."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "vllm_serve_argv": _wrap(vllm_serve_argv),
            "vllm_speculative_config": _wrap(vllm_speculative_config),
            "systemd_exec_line": _wrap(systemd_exec_line),
            "systemd_env_lines": _wrap(systemd_env_lines),
            "vllm_is_loopback": vllm_is_loopback,
            "vllm_bare_host": vllm_bare_host,
            "vllm_server_range_problems": vllm_server_range_problems,
            "systemd_unit_directives": systemd_unit_directives,
            "systemd_unit_properties": systemd_unit_properties,
            "vllm_unit_boundary_id": vllm_unit_boundary_id,
        }
