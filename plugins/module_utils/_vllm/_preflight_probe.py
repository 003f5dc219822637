# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The preflight probe: a script the vllm_serve_preflight module runs with the ml-env's python.

The module writes this file and its stages (_preflight_backends: the attention backends;
_preflight_stub: the CUDA stub re-run) into a private temp directory and runs it with the ml-env
interpreter (`python -I gpuserve_preflight.py REQUEST.json`): only it has vLLM. Stdlib and these
stages only, no package imports. Everything judged here, vLLM judges: its `vllm serve` parser on the unit's argv, its
config classes on the checkpoints' config.json (no weights), and the attention backends it would
choose between on the node's compute capability, through their own `validate_configuration`.
No table of vLLM facts is kept here. Stdlib at the top level, vLLM and torch inside functions.
CUDA buffers backend modules allocate at import go to torch's `meta` device (the running server
holds the GPUs). Without a GPU, vLLM's CPU platform builds the parser (as `vllm bench` does) and
the CUDA platform module is imported for its backend priority list: its compiled ops loaded
against NVIDIA's CUDA stub library when no driver library loads (the probe re-runs itself with
the stub on the loader path, see _preflight_stub), or stubbed as a Python module where the release
allows it; each stand-in is in `notes`.

Each check is reported on its own: passed, refused, or not run with the reason (a check that
cannot run here, or that this probe's code does not fit the release); the others still stand.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import time
import traceback
import typing as t

if __package__:  # a module of the collection (the module's sources, the unit tests)
    from . import _preflight_backends as backends
    from . import _preflight_stub as stub
else:  # the script: its stages lie beside it, a directory isolated mode (-I) leaves off sys.path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _preflight_backends as backends
    import _preflight_stub as stub

_UNRECOGNIZED = re.compile(r"unrecognized arguments: (?P<args>.*)")
_ARGUMENT = re.compile(r"argument (?P<flag>--[\w.-]+)")
PASSED, REFUSED, NOT_RUN = "passed", "refused", "not run"


class Probe:
    """One preflight run; `problems` are refusals, `notes` what could not be judged here."""

    def __init__(self, request: t.Mapping[str, t.Any]) -> None:
        self.request = request
        self.argv: list[str] = [str(a) for a in request["argv"]]
        self.variables: dict[str, str] = dict(request.get("variables") or {})
        self.checks: list[dict[str, t.Any]] = []
        self.problems: list[dict[str, t.Any]] = []
        self.not_run: list[dict[str, str]] = []
        self.notes: list[str] = []
        self.version = "unknown"
        self.gpu = False
        self.timings: dict[str, float] = {}
        self._mark = time.monotonic()

    def lap(self, stage: str) -> None:
        now = time.monotonic()
        self.timings[stage] = round(now - self._mark, 2)
        self._mark = now

    def variable(self, flag: str) -> str:
        return self.variables.get(flag) or f"the flag {flag} (vllm_server_extra_flags)"

    def check(self, name: str, detail: str) -> None:
        self.checks.append({"name": name, "ok": True, "status": PASSED, "detail": detail})

    def refuse(self, name: str, flags: t.Sequence[str], message: str, fix: str) -> None:
        names = sorted({self.variable(f) for f in flags}) or ["the vllm_server settings"]
        self.checks.append({"name": name, "ok": False, "status": REFUSED, "detail": message})
        self.problems.append({"check": name, "variables": names, "flags": list(flags),
                              "message": message.strip(), "fix": fix})

    def skip(self, name: str, reason: str) -> None:
        """Report a check as not run (once), with why; the other verdicts stand."""
        if any(c["name"] == name for c in self.checks):
            return
        self.checks.append({"name": name, "ok": None, "status": NOT_RUN, "detail": reason})
        self.not_run.append({"name": name, "reason": reason})

    def judged(self, name: str) -> str:
        """The status of check `name`, "" when it has none yet."""
        return next((c["status"] for c in self.checks if c["name"] == name), "")

    def guarded(self, names: t.Sequence[str], stage: t.Callable[..., t.Any], *args: t.Any) -> t.Any:
        """Run one stage; an error vLLM gives outside its own refusals (an API this probe does
        not fit, a library this machine lacks) marks the stage's checks not run, with why."""
        try:
            return stage(*args)
        except Exception as exc:  # any error is one check's, never the whole probe's
            reason = (f"vLLM {self.version}: {type(exc).__name__}: {_first_lines(exc)} "
                      "(the probe could not run this check here)")
            for name in names:
                self.skip(name, reason)
            return None

    def platform(self) -> t.Any:
        from vllm import platforms

        if platforms.current_platform.is_unspecified():
            from vllm.platforms.cpu import CpuPlatform

            platforms.current_platform = CpuPlatform()
            self.notes.append("no GPU platform detected: vLLM's CPU platform stands in for "
                              "building the parser and configs (as `vllm bench` does)")
        return platforms.current_platform

    def parse(self) -> t.Any:
        """vLLM's `vllm serve` parser on argv[1:], then the serve subcommand's own validate()."""
        serve = _serve_module()
        try:
            from vllm.utils.argparse_utils import FlexibleArgumentParser
        except ImportError:  # older layout
            from vllm.utils import FlexibleArgumentParser  # type: ignore[no-redef]
        parser = FlexibleArgumentParser(prog="vllm")
        subparsers = parser.add_subparsers(required=False, dest="subparser")
        commands = {}
        for cmd in serve.cmd_init():
            cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
            commands[cmd.name] = cmd
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = parser.parse_args(self.argv[1:])
        except SystemExit:
            text = err.getvalue().strip().splitlines()
            message = text[-1] if text else "vllm serve refused the command line"
            unknown = _UNRECOGNIZED.search(message)
            flags = ([a for a in unknown.group("args").split() if a.startswith("--")] if unknown
                     else _ARGUMENT.findall(message))
            fix = ("remove the flag, or pin a vLLM release that has it (vllm_install_version)"
                   if unknown else "give the value vLLM's parser accepts (see the message)")
            self.refuse("parser", flags, f"vLLM {self.version}: {message}", fix)
            return None
        try:
            commands[args.subparser].validate(args)
        except Exception as exc:  # vLLM raises TypeError/ValueError here
            flags = [f for f in self._flags() if f.lstrip("-").replace("-", "_") in str(exc)
                     or f in str(exc)]
            self.refuse("serve-validate", flags, f"vLLM {self.version}: {exc}",
                        "set the flags vLLM asks for in the message")
            return None
        if getattr(args, "model_tag", None):
            args.model = args.model_tag
        self.check("parser", f"vLLM {self.version}'s `vllm serve` parser accepts all "
                             f"{len(self._flags())} flags")
        return args

    def _flags(self) -> list[str]:
        return [a for a in self.argv if a.startswith("--")]

    def configs(self, args: t.Any) -> tuple[t.Any, t.Any, t.Any]:
        """Model config, speculative config and (where vLLM gets that far here) engine config."""
        from vllm.engine.arg_utils import AsyncEngineArgs

        engine_args = AsyncEngineArgs.from_cli_args(args)
        try:
            model_config = engine_args.create_model_config()
        except Exception as exc:
            self.refuse("model-config", ["--model"] + self._mentioned(exc),
                        f"vLLM {self.version} cannot build the model config from "
                        f"{engine_args.model}/config.json: {_first_lines(exc)}",
                        "point vllm_server_model_path at the checkpoint and fix the flags named")
            return None, None, None
        self.check("model-config", f"{type(model_config.hf_config).__name__} "
                                   f"(text model_type {model_config.hf_text_config.model_type}, "
                                   f"MLA {model_config.use_mla}) from config.json")
        spec = None
        if engine_args.speculative_config:
            spec = self.speculative(engine_args, model_config)
            if spec is None:
                return model_config, None, None
        try:
            engine_config = engine_args.create_engine_config()
        except Exception as exc:
            message = f"create_engine_config stopped here: {_first_lines(exc)}"
            if self.gpu:
                self.refuse("engine-config", self._mentioned(exc), f"vLLM {self.version}: "
                            + message, "fix the flags named in the message")
            else:
                self.notes.append(message + " (no GPU on this machine: not a refusal)")
            return model_config, spec, None
        self.check("engine-config", "create_engine_config() accepted the whole configuration")
        return model_config, spec, engine_config

    def speculative(self, engine_args: t.Any, model_config: t.Any) -> t.Any:
        from vllm.config import ParallelConfig

        parallel = ParallelConfig(tensor_parallel_size=engine_args.tensor_parallel_size,
                                  pipeline_parallel_size=engine_args.pipeline_parallel_size)
        asked = json.dumps(dict(engine_args.speculative_config), default=str)[:300]
        try:
            spec = engine_args.create_speculative_config(model_config, parallel)
        except Exception as exc:
            self.refuse("speculative-config", ["--speculative-config"],
                        f"vLLM {self.version}: SpeculativeConfig refused {asked}: "
                        f"{_first_lines(exc)}",
                        "use a drafter, method and target this vLLM supports; for EAGLE-3 with "
                        "Kimi-K2.5 on 0.16/0.17 the eagle3_patches role must have run")
            return None
        draft = getattr(spec, "draft_model_config", None)
        detail = f"method {spec.method}, {spec.num_speculative_tokens} tokens"
        if draft is not None and spec.method in ("eagle3", "eagle"):
            # vLLM's EAGLE-3 heads size their fc layer from the drafter's target_hidden_size
            # (else its hidden_size) times 3: it must match the target's hidden size.
            drafted = getattr(draft.hf_config, "target_hidden_size", None) or \
                draft.hf_config.hidden_size
            target = model_config.get_hidden_size()
            if drafted != target:
                self.refuse("drafter-hidden-size", ["--speculative-config"],
                            f"vLLM {self.version}: the drafter {draft.model} is built for a "
                            f"target hidden size of {drafted}, the target "
                            f"{model_config.model} has {target}",
                            "use a drafter trained for this target model")
                return None
            detail += f", drafter {type(draft.hf_config).__name__} hidden size {drafted} = target's"
        self.check("speculative-config", detail)
        return spec

    def _mentioned(self, exc: BaseException) -> list[str]:
        text = str(exc)
        return [f for f in self._flags()
                if f.lstrip("-").split(".")[0].replace("-", "_") in text]

    def capability(self, platform: t.Any) -> tuple[int, int] | None:
        """The GPU's compute capability (a detected GPU wins), else the one given."""
        if self.gpu:
            cap = platform.get_device_capability()
            if cap is not None:
                return cap.major, cap.minor
        given = str(self.request.get("compute_capability") or "").strip()
        if not given:
            return None
        major, _dot, minor = given.partition(".")
        return int(major), int(minor or 0)

    def run(self) -> dict[str, t.Any]:
        started = time.monotonic()
        result: dict[str, t.Any] = {"skipped": False}
        try:
            from importlib.metadata import version

            self.version = version("vllm")
        except Exception as exc:
            return {"skipped": True, "skip_reason": f"vLLM is not installed here ({exc})"}
        try:
            import torch  # noqa: F401  (vLLM without its dependencies: rehearsal with no_deps)
            import vllm  # noqa: F401
        except ImportError as exc:
            return {"skipped": True, "vllm_version": self.version,
                    "skip_reason": f"vLLM {self.version} is installed without its dependencies "
                                   f"({exc}); vLLM's parser and configs cannot run, nothing was "
                                   "checked (vllm_install_no_deps?)"}
        self.lap("import vllm")
        if os.environ.get(stub.STUB_ENV):
            self.notes.append(f"no NVIDIA driver library ({stub.DRIVER_LIBRARY}) on this machine: "
                              f"vLLM's compiled ops were loaded against NVIDIA's CUDA stub "
                              f"library {os.environ[stub.STUB_ENV]} (its calls answer "
                              "CUDA_ERROR_STUB_LIBRARY; nothing ran on a GPU)")
        platform = self.platform()
        self.gpu = not platform.is_cpu()
        result.update(platform=type(platform).__name__, gpu=self.gpu)
        self.judge(platform, result)
        result.update({"vllm_version": self.version, "checks": self.checks,
                       "problems": self.problems, "not_run": self.not_run, "notes": self.notes,
                       "timings": self.timings,
                       "seconds": round(time.monotonic() - started, 2)})
        return result

    def not_judged(self, args: t.Any) -> str:
        """Why the checks that read the checkpoints cannot run ('' when they can)."""
        unread = dict(self.request.get("unread_models") or {})
        untrusted = dict(self.request.get("untrusted_models") or {})
        if args is None:
            return ("vLLM's parser refused the command line" if self.problems
                    else "the parser check did not run")
        if unread:
            return (" and ".join(f"the {role} {path}" for role, path in sorted(unread.items()))
                    + (" are not local directories" if len(unread) > 1 else " is not a local directory")
                    + ": vLLM would read it from the service's Hugging "
                    "Face cache, which root's preflight never reads (its own cache is a root-owned "
                    "scratch directory); give vllm_server_model_path (and the drafter) as local "
                    "directories for these checks to run")
        if untrusted:
            return ("--trust-remote-code is set and another user could change "
                    + " and ".join(f"the {role} {why}" for role, why in sorted(untrusted.items()))
                    + ": vLLM would import the checkpoint's Python as root, so root's preflight "
                    "does not build its configs; give the checkpoint to root (no group or other "
                    "write) for these checks to run")
        return ""

    def judge(self, platform: t.Any, result: dict[str, t.Any]) -> None:
        """Every check in order; each one that cannot be judged says why, the rest go on."""
        later = ["model-config"] + (["speculative-config"] if any(
            a.split("=")[0].split(".")[0] == "--speculative-config" for a in self.argv) else [])
        later.append("attention-backend-target")
        args = self.guarded(["parser"], self.parse)
        self.lap("parser")
        why = self.not_judged(args)
        if why:
            for name in later:
                self.skip(name, f"not judged: {why}")
            return
        model_config, spec, engine_config = self.guarded(later[:-1], self.configs, args) or \
            (None, None, None)
        self.lap("configs")
        for name in later[1:-1]:
            if not self.judged(name):
                self.skip(name, "not judged: no model config (see model-config)")
        cap = self.guarded(["attention-backend-target"], self.capability, platform)
        result["compute_capability"] = f"{cap[0]}.{cap[1]}" if cap else None
        if model_config is None:
            self.skip("attention-backend-target", "not judged: no model config (see model-config)")
        elif cap is None:
            self.skip("attention-backend-target", "no compute capability known (no GPU detected "
                      "and vllm_server_preflight_compute_capability empty): KV-cache dtype and "
                      "attention backends not checked")
        else:
            names = ["attention-backend-target"]
            if getattr(spec, "draft_model_config", None) is not None:
                names.append("attention-backend-drafter")
            self.guarded(names, backends.judge, self, cap, args, model_config, engine_config, spec)
            self.lap("attention backends")
        if len(later) > 2 and spec is None and self.judged("speculative-config") != PASSED:
            self.skip("attention-backend-drafter",
                      "not judged: no speculative config (see speculative-config)")


def _serve_module() -> t.Any:
    """vLLM's own serve.py, imported without vllm/entrypoints/cli/__init__.py.

    That __init__ (0.16-0.18) only loads the `vllm bench` subcommands (~3 s), unused by serve.py;
    the package comes from its real spec. tests/vllm_full compares the parser with a normal import.
    """
    import importlib
    import importlib.util

    name = "vllm.entrypoints.cli"
    if name not in sys.modules:
        package = importlib.util.module_from_spec(importlib.util.find_spec(name))
        sys.modules[name] = package
        setattr(sys.modules["vllm.entrypoints"], "cli", package)
    return importlib.import_module(name + ".serve")


def _first_lines(exc: BaseException, limit: int = 3) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    lines = [line.split(" [type=")[0] for line in lines if "errors.pydantic.dev" not in line]
    return " ".join(line.strip() for line in lines[:limit]) or type(exc).__name__


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    stub_env = stub.cuda_stub_env(request, sys.argv[0])
    if stub_env is not None:  # the loader reads LD_LIBRARY_PATH only when a process starts
        flags = (["-I"] if sys.flags.isolated else []) + (["-B"] if sys.flags.dont_write_bytecode else [])
        os.execve(sys.executable, [sys.executable, *flags, *sys.argv], stub_env)
    probe = Probe(request)
    try:
        result = probe.run()
    except Exception:
        result = {"skipped": False, "crashed": True, "error": traceback.format_exc()[-4000:],
                  "vllm_version": probe.version, "checks": probe.checks,
                  "problems": probe.problems, "not_run": probe.not_run, "notes": probe.notes}
    with open(request["result_path"], "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0


if __name__ == "__main__":
    main()  # the result is written and closed: skip torch/vLLM's teardown (2-7 s measured)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
