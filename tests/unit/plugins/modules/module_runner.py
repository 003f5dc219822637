"""Shared helper for module tests that call a module's main() in-process."""

from __future__ import annotations

import typing as t

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


def run_module_main(module: t.Any, args: dict[str, t.Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, t.Any]:
    """Run a module's main() with args; return what it exited or failed with (plus `failed`)."""
    results: list[dict[str, t.Any]] = []

    def exit_json(self: t.Any, **kwargs: t.Any) -> None:
        results.append(dict(kwargs, failed=False))
        raise SystemExit(0)

    def fail_json(self: t.Any, msg: str, **kwargs: t.Any) -> None:
        results.append(dict(kwargs, msg=msg, failed=True))
        raise SystemExit(1)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return results[0]
