# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The preflight probe: a script the vllm_serve_preflight module runs with the ml-env's python.

The module sends this file's source to the ml-env interpreter (`python - REQUEST.json`): only it
has vLLM. Everything judged here, vLLM judges: its `vllm serve` parser on the unit's argv, its
config classes on the checkpoints' config.json (no weights), and the attention backends it would
choose between on the node's compute capability, through their own `validate_configuration`.
No table of vLLM facts is kept here. Stdlib at the top level, vLLM and torch inside functions.
CUDA buffers backend modules allocate at import go to torch's `meta` device (the running server
holds the GPUs). Without a GPU, vLLM's CPU platform builds the parser (as `vllm bench` does) and
the CUDA platform module is imported for its backend priority list: its compiled ops loaded
against NVIDIA's CUDA stub library when no driver library loads (the probe re-runs itself with
the stub on the loader path, see cuda_stub_env), or stubbed as a Python module where the release
allows it; each stand-in is in `notes`.

Each check is reported on its own: passed, refused, or not run with the reason (a check that
cannot run here, or that this probe's code does not fit the release); the others still stand.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import io
import json
import os
import re
import sys
import time
import traceback
import typing as t

_UNRECOGNIZED = re.compile(r"unrecognized arguments: (?P<args>.*)")
_ARGUMENT = re.compile(r"argument (?P<flag>--[\w.-]+)")
PASSED, REFUSED, NOT_RUN = "passed", "refused", "not run"
DRIVER_LIBRARY = "libcuda.so.1"
CUDA_ERROR_STUB_LIBRARY = 34  # what cuInit of NVIDIA's link-time stub libcuda answers
STUB_ENV = "GPUSERVE_PREFLIGHT_CUDA_STUB"  # set on the re-run: the stub's path


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

    def backends(self, cap: tuple[int, int], args: t.Any, model_config: t.Any,
                 engine_config: t.Any, spec: t.Any) -> None:
        """Ask the backends vLLM's CUDA platform would pick from, for the target and drafter."""
        draft = getattr(spec, "draft_model_config", None) if spec is not None else None
        models = [("target", model_config)] + ([("drafter", draft)] if draft is not None else [])
        names = [f"attention-backend-{role}" for role, _config in models]
        try:
            cuda = self._cuda_platform()
        except ImportError as exc:
            for name in names:
                self.skip(name, self._no_cuda_platform(exc))
            return
        from vllm.config import VllmConfig, set_current_vllm_config
        from vllm.platforms.interface import DeviceCapability
        from vllm.v1.attention.selector import AttentionSelectorConfig

        device = DeviceCapability(*cap)
        kv = args.kv_cache_dtype or "auto"
        vllm_config = engine_config
        if vllm_config is None:
            try:
                vllm_config = VllmConfig(model_config=model_config)
            except Exception:
                vllm_config = VllmConfig()
        selected = getattr(args, "attention_backend", None)
        with set_current_vllm_config(vllm_config):
            for (role, config), name in zip(models, names):
                self.guarded([name], self._judge_model, cuda, device, AttentionSelectorConfig,
                             args, selected, role, config, kv)

    def _judge_model(self, cuda: t.Any, device: t.Any, selector_type: t.Any, args: t.Any,
                     selected: t.Any, role: str, config: t.Any, kv: str) -> None:
        fields = {
            "head_size": config.get_head_size(), "dtype": config.dtype,
            "kv_cache_dtype": kv, "block_size": None, "use_mla": config.use_mla,
            # vLLM's DeepSeek model uses sparse attention when the config has index_topk
            "use_sparse": hasattr(config.hf_text_config, "index_topk"),
        }
        selector = selector_type(**{k: v for k, v in fields.items() if k in selector_type._fields})
        heads = config.hf_text_config.num_attention_heads // max(
            1, int(args.tensor_parallel_size or 1))
        self._judge(cuda, device, selector, heads, selected, role, config, kv)

    def _judge(self, cuda: t.Any, device: t.Any, selector: t.Any, heads: int, selected: t.Any,
               role: str, config: t.Any, kv: str) -> None:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        if selected:
            candidates = [AttentionBackendEnum[getattr(selected, "name", str(selected)).upper()]]
        else:
            try:
                candidates = cuda._get_backend_priorities(selector.use_mla, device, heads)
            except TypeError:  # 0.16: no num_heads parameter
                candidates = cuda._get_backend_priorities(selector.use_mla, device)
        valid, reasons = [], {}
        for backend in candidates:
            try:
                with _cuda_buffers_on_meta(self):
                    cls = backend.get_class()
            except ImportError as exc:
                reasons[backend.name] = [f"ImportError: {exc}"]
                continue
            invalid = cls.validate_configuration(device_capability=device, **selector._asdict())
            if invalid:
                reasons[backend.name] = list(invalid)
            else:
                valid.append(backend.name)
        where = f"compute capability {device.major}.{device.minor}"
        what = (f"{role} ({type(config.hf_config).__name__}, "
                f"{'MLA' if selector.use_mla else 'non-MLA'}, head size {selector.head_size}, "
                f"KV cache {kv})")
        if valid:
            self.check(f"attention-backend-{role}", f"{what}: {', '.join(valid)} on {where}")
            return
        # Which dtypes would work: those of the backends that pass every other test.
        usable = sorted({d for name in reasons
                         for d in _supported_dtypes(AttentionBackendEnum[name])
                         if reasons[name] == ["kv_cache_dtype not supported"]})
        fix = (f"set vllm_server_kv_cache_dtype to one of {usable} (the KV-cache dtypes of the "
               f"backends that support {where} in vLLM {self.version}), or pin a vLLM release "
               f"whose backends take {kv} on this GPU (vllm_install_version)") if usable else \
            "choose another attention backend, KV-cache dtype or vLLM release"
        flags = ["--kv-cache-dtype"] + (["--attention-backend"] if selected else [])
        detail = "; ".join(f"{n}: {', '.join(r)}" for n, r in reasons.items())
        self.refuse(f"attention-backend-{role}", flags,
                    f"vLLM {self.version} has no attention backend for the {what} on {where} "
                    f"(vLLM would stop with 'No valid attention backend found'): {detail}", fix)

    def _cuda_platform(self) -> t.Any:
        """vLLM's CUDA platform module; raises ImportError (the first one) when it cannot load."""
        try:
            from vllm.platforms import cuda
        except ImportError as exc:  # no CUDA driver here: only the priority list is read
            import types

            sys.modules["vllm._C"] = types.ModuleType("vllm._C")
            try:
                from vllm.platforms import cuda
            except ImportError:
                del sys.modules["vllm._C"]
                raise exc from None
            self.notes.append(f"vllm.platforms.cuda imported with vllm._C stubbed ({exc})")
        return cuda

    def _no_cuda_platform(self, exc: ImportError) -> str:
        why = f"vLLM {self.version}'s CUDA platform module cannot be imported here ({exc})"
        if DRIVER_LIBRARY.split(".", maxsplit=1)[0] not in str(exc):
            return why
        if os.environ.get(STUB_ENV):
            return why + f", even with the CUDA stub library {os.environ[STUB_ENV]}"
        stub = ("cuda_stub is false" if not self.request.get("cuda_stub", True)
                else "the env ships no CUDA stub library")
        return (why + f": no NVIDIA driver library on this machine and {stub}; on a GPU node "
                "this check runs")

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
        if os.environ.get(STUB_ENV):
            self.notes.append(f"no NVIDIA driver library ({DRIVER_LIBRARY}) on this machine: "
                              f"vLLM's compiled ops were loaded against NVIDIA's CUDA stub "
                              f"library {os.environ[STUB_ENV]} (its calls answer "
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
            self.guarded(names, self.backends, cap, args, model_config, engine_config, spec)
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


def _supported_dtypes(backend: t.Any) -> list[str]:
    try:
        return list(getattr(backend.get_class(), "supported_kv_cache_dtypes", []) or [])
    except Exception:
        return []


@contextlib.contextmanager
def _cuda_buffers_on_meta(probe: Probe) -> t.Iterator[None]:
    """CUDA tensors a backend module allocates at import go to `meta`: always, since on a node
    the running server holds the GPUs and no CUDA context may open next to it."""
    from torch.overrides import TorchFunctionMode

    class _Meta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = dict(kwargs or {})
            if str(kwargs.get("device", "")).startswith("cuda"):
                kwargs["device"] = "meta"
            return func(*args, **kwargs)

    note = "CUDA buffers that attention backend modules allocate at import went to torch's meta device"
    if note not in probe.notes:
        probe.notes.append(note)
    with _Meta():
        yield


def _first_lines(exc: BaseException, limit: int = 3) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    lines = [line.split(" [type=")[0] for line in lines if "errors.pydantic.dev" not in line]
    return " ".join(line.strip() for line in lines[:limit]) or type(exc).__name__


def cuda_stub_env(request: t.Mapping[str, t.Any], script: str) -> dict[str, str] | None:
    """The environment to re-run this script with NVIDIA's CUDA stub library, or None.

    Only where the driver library does not load (no NVIDIA driver: CI, a rehearsal with all
    dependencies) and the env ships the stub (a libcuda whose cuInit answers
    CUDA_ERROR_STUB_LIBRARY; vLLM 0.33's pynvvideocodec dependency carries one): vLLM's compiled
    ops then load and its CUDA platform's backend list can be read. Never on the re-run itself,
    never with cuda_stub false, never when run from stdin (nothing to re-run).
    """
    if not request.get("cuda_stub", True) or os.environ.get(STUB_ENV) is not None \
            or not os.path.isfile(script) or _loads(DRIVER_LIBRARY):
        return None
    stub = find_cuda_stub([p for p in sys.path if p.endswith(("site-packages", "dist-packages"))])
    if not stub:
        return None
    links = os.path.join(os.path.dirname(request["result_path"]), "cuda-stub")
    os.makedirs(links, mode=0o700, exist_ok=True)
    link = os.path.join(links, DRIVER_LIBRARY)
    if not os.path.islink(link):
        os.symlink(stub, link)
    loader_path = os.environ.get("LD_LIBRARY_PATH", "")
    loader_path = links + (os.pathsep + loader_path if loader_path else "")
    return dict(os.environ, LD_LIBRARY_PATH=loader_path, **{STUB_ENV: stub})


def find_cuda_stub(dirs: t.Sequence[str]) -> str:
    """The first libcuda under dirs (one level down) that is NVIDIA's stub, or ""."""
    for base in dirs:
        for path in sorted(glob.glob(os.path.join(glob.escape(base), "*", "libcuda*.so*"))):
            name = os.path.basename(path)
            if name.startswith(("libcuda.", "libcuda-")) and _is_stub(path):
                return path
    return ""


def _loads(library: str) -> bool:
    try:
        ctypes.CDLL(library)
    except OSError:
        return False
    return True


def _is_stub(path: str) -> bool:
    """True for NVIDIA's link-time stub libcuda (cuInit answers CUDA_ERROR_STUB_LIBRARY)."""
    try:
        init = getattr(ctypes.CDLL(path), "cuInit", None)
    except OSError:
        return False
    return init is not None and init(0) == CUDA_ERROR_STUB_LIBRARY


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    stub_env = cuda_stub_env(request, sys.argv[0])
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
