# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The checks python_patch runs on new bytes, each bounded by check_timeout in its own process group.

Stdlib only, no Ansible imports: a mixin of PythonPatch (see _run), which provides
``params``, ``python``, ``timeout`` and ``jobs``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import tempfile
import typing as t

from . import _txn as px
from .._env import _pyenv
from ._plan import FileJob, PatchFailed
from .._pyedit import STATUS_APPLIED, STATUS_REVERTED, SourceSyntaxError

# Compiles every file given on stdin (JSON list of [name, base64 bytes]) in memory; prints the
# interpreter's version and the SyntaxErrors as JSON. Runs under the target interpreter.
_COMPILE_SCRIPT = r"""
import base64, json, sys
errors = []
for name, data in json.load(sys.stdin):
    try:
        compile(base64.b64decode(data), name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        errors.append({"path": name, "msg": exc.msg, "lineno": exc.lineno,
                       "offset": exc.offset, "text": (exc.text or "").rstrip("\r\n")})
    except (ValueError, TypeError) as exc:
        errors.append({"path": name, "msg": str(exc), "lineno": None, "offset": None, "text": ""})
sys.stdout.write(json.dumps({"version": "%d.%d.%d" % sys.version_info[:3], "errors": errors}))
"""

# Imports the modules named in argv; on failure prints which one and the traceback, exits 1.
_IMPORT_SCRIPT = r"""
import importlib, sys, traceback
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException:
        sys.stderr.write("import %s failed:\n%s" % (name, traceback.format_exc()))
        raise SystemExit(1)
"""


def python_version() -> str:
    """The version of the Python running this code, as 'X.Y.Z'."""
    return "%d.%d.%d" % sys.version_info[:3]


class Checks:
    """Compile check, validate, import_check and the newer-syntax diagnosis."""

    params: t.Dict[str, t.Any]
    python: str
    timeout: int
    jobs: t.List[FileJob]

    def _newer_syntax(self, job: FileJob, exc: SourceSyntaxError) -> str:
        """When the target interpreter compiles what ours cannot parse, say so and what to do."""
        if exc.lineno is None or os.path.realpath(self.python) == os.path.realpath(sys.executable):
            return ""
        try:
            version, errors = self._compile([job.real], [job.before])
        except PatchFailed:
            return ""
        if errors:
            return ""
        return ("%s: uses syntax newer than Python %s, which runs this module (%s) and cannot "
                "parse line %s (%r); Python %s (the `python` option, %s) compiles it. Run the "
                "module with ansible_python_interpreter set to Python %s or newer, for example "
                "the `python` option's interpreter (refused; nothing was written)"
                % (job.path, python_version(), sys.executable, exc.lineno,
                   (exc.line or "").strip(), version, self.python, version))

    def _require_python(self) -> None:
        if shutil.which(self.python) is None:
            raise PatchFailed("python %s (the interpreter for the compile and import checks) is "
                              "not an executable file; set python to the environment's "
                              "interpreter; nothing was written" % self.python)

    def _python_call(self, args: t.List[str]) -> t.Tuple[t.List[str], t.Dict[str, str]]:
        """The checks' interpreter call (-I, a clean environment); refused when the interpreter's
        files are not root's alone."""
        try:
            return _pyenv.isolated_call(self.python, args)
        except _pyenv.UntrustedInterpreter as exc:
            raise PatchFailed("%s; nothing was written" % exc) from exc

    def _run(self, what: str, argv: t.List[str], data: bytes | None = None,
             env_changes: t.Mapping[str, str] | None = None) -> t.Tuple[int, str, str]:
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        env.update(env_changes or {})
        try:
            rc, out, err = px.run_bounded(argv, self.timeout, data=data, env=env, cwd="/")
        except OSError as exc:
            raise PatchFailed("%s: cannot run %s: %s" % (what, argv[0], exc)) from exc
        if rc is None:
            shown = " ".join(argv) if len(" ".join(argv)) < 300 else argv[0] + " ..."
            raise PatchFailed("%s did not finish within %s s (check_timeout): its process group "
                              "was killed; command: %s" % (what, self.timeout, shown),
                              timed_out=True, command=argv)
        return rc, out, err

    def _compile(self, names: t.List[str], datas: t.List[bytes]) -> t.Tuple[str, t.List[t.Any]]:
        self._require_python()
        payload = json.dumps([[n, base64.b64encode(d).decode("ascii")]
                              for n, d in zip(names, datas)]).encode("utf-8")
        argv, env = self._python_call(["-c", _COMPILE_SCRIPT])
        rc, out, err = self._run("the compile check with %s" % self.python, argv, payload, env)
        try:
            found = json.loads(out) if rc == 0 else None
        except ValueError:
            found = None
        if found is None:
            raise PatchFailed("the compile check with %s did not run (rc=%s): %s; nothing was "
                              "written" % (self.python, rc, (err or out).strip()[-2000:]),
                              rc=rc, stdout=out, stderr=err)
        return found["version"], found["errors"]

    def _compile_check(self, jobs: t.List[FileJob]) -> None:
        errors = self._compile([j.real for j in jobs], [j.after for j in jobs])[1]
        if errors:
            lines = []
            by_real = {j.real: j for j in jobs}
            for e in errors:
                job = by_real.get(e["path"])
                ids = ", ".join(r["id"] for r in job.results if r["status"] == STATUS_APPLIED) \
                    if job else ""
                lines.append("%s: the edited file does not compile with %s: %s (line %s: %r); "
                             "edits applied: %s" % (job.path if job else e["path"], self.python,
                                                    e["msg"], e["lineno"], e["text"], ids))
            raise PatchFailed("; ".join(lines) + "; nothing was written", compile_errors=errors)

    def _validate(self, job: FileJob, tmp: str) -> None:
        cmd = self.params["validate"] % tmp
        rc, out, err = self._run("%s: validate command %r" % (job.path, cmd), px.split_command(cmd))
        if rc != 0:
            ids = ", ".join(r["id"] for r in job.results
                            if r["status"] in (STATUS_APPLIED, STATUS_REVERTED))
            raise PatchFailed(
                "%s: validate command %r failed (rc=%s) on the new content (edits %s): %s"
                % (job.path, cmd, rc, ids, (err or out).strip()[-2000:]),
                file=job.path, rc=rc, stdout=out, stderr=err)

    def _import_check(self) -> None:
        names = self.params["import_check"]
        argv, env = self._python_call(["-c", _IMPORT_SCRIPT] + list(names))
        rc, out, err = self._run("import_check of %s with %s" % (", ".join(names), self.python),
                                 argv, env_changes=env)
        if rc != 0:
            tail = "\n".join((err or out).strip().splitlines()[-6:])
            raise PatchFailed(
                "import_check failed with %s after writing %s: %s"
                % (self.python, ", ".join(j.path for j in self.jobs if j.changed), tail),
                rc=rc, stdout=out, stderr=err)

    def _check_mode_validate(self, changed: t.List[FileJob]) -> None:
        if not changed or not self.params["validate"]:
            return
        with tempfile.TemporaryDirectory(prefix="python_patch-") as tmpdir:
            for job in changed:
                tmp = os.path.join(tmpdir, os.path.basename(job.real))
                with open(tmp, "wb") as handle:
                    handle.write(job.after)
                self._validate(job, tmp)
                os.unlink(tmp)
