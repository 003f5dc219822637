"""python_env_protect's main(): check mode predicts, a run fixes once, a failure says what to do."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from module_runner import run_module_main  # noqa: E402

from ansible_collections.gpuserve.vllm.plugins.modules import python_env_protect  # noqa: E402


def _env(tmp_path: Path) -> Path:
    (tmp_path / "env" / "lib").mkdir(parents=True)
    (tmp_path / "env" / "lib" / "evil.pth").write_text("import os\n")
    (tmp_path / "env" / "lib" / "evil.pth").chmod(0o666)
    return tmp_path / "env"


def test_check_mode_then_a_run_then_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env(tmp_path)
    args = {"paths": [str(env), str(tmp_path / "missing")]}
    checked = run_module_main(python_env_protect, dict(args, _ansible_check_mode=True), monkeypatch)
    assert checked["changed"] is True and checked["fixed"] == 1
    assert stat.S_IMODE((env / "lib" / "evil.pth").stat().st_mode) == 0o666
    done = run_module_main(python_env_protect, args, monkeypatch)
    assert (done["changed"], done["fixed"], done["checked"]) == (True, 1, 3)
    assert done["examples"] == ["%s: mode 0666 -> 0644" % (env / "lib" / "evil.pth")]
    assert stat.S_IMODE((env / "lib" / "evil.pth").stat().st_mode) == 0o644
    again = run_module_main(python_env_protect, args, monkeypatch)
    assert (again["changed"], again["fixed"]) == (False, 0)


def test_a_failure_names_the_entry_and_become(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env(tmp_path)

    def refuse(path: str, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted", path)

    monkeypatch.setattr(os, "chmod", refuse)
    result = run_module_main(python_env_protect, {"paths": [str(env)]}, monkeypatch)
    assert result["failed"] is True
    assert result["msg"] == ("could not give %s to uid %d: Operation not permitted; run the task "
                             "with become: true" % (env / "lib" / "evil.pth", os.geteuid()))
