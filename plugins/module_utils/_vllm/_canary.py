# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The canary before an env switch: its `vllm serve` argv, its systemd-run line, the decisions.

The canary is the new env's `vllm serve` with the unit's own flags, on another port, with random
weights (`--load-format dummy`: no shard is read; vLLM loads the EAGLE-3 drafter with the
target's load config, so it is dummy too) and fewer layers (`--hf-overrides`, nested into
`text_config` when the checkpoint's config.json nests one, as Kimi-K2.5's does: vLLM's
ModelConfig updates a nested sub-config in place). It proves the env starts, compiles, captures
and answers, in minutes instead of a full load.

Stdlib only, Python 3.9+, no Ansible imports: the filter plugins run this on the controller.
"""

from __future__ import annotations

import json
import typing as t

# EAGLE-3 targets hand the drafter three hidden states, taken before the layers
# (2, n // 2, n - 3) (vLLM's DeepseekV2ForCausalLM.get_eagle3_aux_hidden_state_layers, and the
# collection's patch for 0.16/0.17). The forward pass tests `idx in layers`, so the three must
# be distinct existing layers, or the drafter's fc input is short and the canary would fail for
# a reason a real start does not have: n >= 7.
EAGLE3_DEFAULT_MIN_LAYERS = 7


class CanaryError(ValueError):
    """An input the canary cannot be built from; the message names it."""


def text_config(model_config: t.Mapping[str, t.Any]) -> tuple[t.Mapping[str, t.Any], bool]:
    """(the language model's config, whether it is nested under `text_config`)."""
    nested = model_config.get("text_config")
    if isinstance(nested, t.Mapping):
        return nested, True
    return model_config, False


def _int_or_none(value: t.Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def canary_layers(model_config: t.Mapping[str, t.Any], requested: t.Any,
                  drafter_config: t.Mapping[str, t.Any] | None = None,
                  method: str | None = None) -> tuple[int, list[str]]:
    """(layer count the canary runs, why it is more than asked) for the checkpoint's config."""
    asked = _int_or_none(requested)
    if asked is None or asked < 1:
        raise CanaryError(f"vllm_server_canary_layers must be an integer >= 1, found {requested!r}")
    text, _nested = text_config(model_config)
    layers, reasons = asked, []
    dense = _int_or_none(text.get("first_k_dense_replace"))
    if dense is not None and dense + 1 > layers:
        layers = dense + 1
        reasons.append(f"first_k_dense_replace is {dense}: {layers} layers keep one MoE layer")
    if drafter_config is not None and str(method or "") == "eagle3":
        ids = drafter_config.get("eagle_aux_hidden_state_layer_ids")
        ids = [i for i in (ids or []) if _int_or_none(i) is not None]
        need = max(int(i) for i in ids) + 1 if ids else EAGLE3_DEFAULT_MIN_LAYERS
        if need > layers:
            layers = need
            reasons.append(
                f"the EAGLE-3 drafter reads hidden states of target layers {sorted(int(i) for i in ids)}"
                if ids else
                f"the EAGLE-3 drafter reads three distinct target layers (2, n//2, n-3): n >= {need}")
    total = _int_or_none(text.get("num_hidden_layers"))
    if total is not None and layers >= total:
        return total, reasons + [f"the model has only {total} layers: the canary runs them all"]
    return layers, reasons


def _deep_merge(base: t.Mapping[str, t.Any], over: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, t.Mapping) and isinstance(merged.get(key), t.Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def canary_overrides(model_config: t.Mapping[str, t.Any], layers: int,
                     user: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
    """The --hf-overrides mapping: the user's own, with the canary's layer count on top."""
    _text, nested = text_config(model_config)
    ours: dict[str, t.Any] = {"num_hidden_layers": int(layers)}
    if nested:
        ours = {"text_config": ours}
    return _deep_merge(dict(user or {}), ours)


def _split_flag(arg: str) -> tuple[str, str | None]:
    """`--port=8000` -> ('--port', '8000'); `--port` -> ('--port', None)."""
    if arg.startswith("--") and "=" in arg:
        flag, _sep, value = arg.partition("=")
        return flag, value
    return arg, None


def flag_value(argv: t.Sequence[str], flag: str) -> str | None:
    """The value of `flag` in argv (last one wins, as in argparse), or None."""
    found = None
    for i, arg in enumerate(argv):
        name, inline = _split_flag(str(arg))
        if name == flag:
            found = inline if inline is not None else (str(argv[i + 1]) if i + 1 < len(argv) else None)
    return found


def without_flags(argv: t.Sequence[str], flags: t.Iterable[str]) -> list[str]:
    """argv less the given valued flags (both `--f v` and `--f=v` forms)."""
    drop = set(flags)
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name, inline = _split_flag(str(arg))
        if name in drop:
            skip = inline is None
            continue
        out.append(str(arg))
    return out


def canary_argv(argv: t.Sequence[str], target: str, port: t.Any,
                model_config: t.Mapping[str, t.Any], layers: int,
                gpu_memory_utilization: t.Any = None) -> list[str]:
    """The unit's argv turned into the canary's: the target env's vllm, loopback and the canary
    port, dummy weights, fewer layers, and (beside a live server) the GPU memory it may take;
    every other flag as the unit has it."""
    if len(argv) < 3 or str(argv[1]) != "serve":
        raise CanaryError(f"not a `vllm serve` command line: {list(argv)[:3]!r}")
    if not str(target).startswith("/"):
        raise CanaryError(f"vllm_server_env_target must be an absolute path, found {target!r}")
    canary_port = _int_or_none(port)
    if canary_port is None or not 1 <= canary_port <= 65535:
        raise CanaryError(f"vllm_server_canary_port must be an integer from 1 to 65535, found {port!r}")
    if flag_value(argv, "--port") == str(canary_port):
        raise CanaryError(f"vllm_server_canary_port {canary_port} is the server's own port: choose another")
    user_text = flag_value(argv, "--hf-overrides")
    user: dict[str, t.Any] = {}
    if user_text:
        try:
            user = json.loads(user_text)
        except ValueError as exc:
            raise CanaryError(f"--hf-overrides is not JSON ({exc}): {user_text!r}") from None
        if not isinstance(user, dict):
            raise CanaryError(f"--hf-overrides must be a JSON object, found {user_text!r}")
    overrides = canary_overrides(model_config, layers, user)
    replaced = ["--host", "--port", "--load-format", "--hf-overrides"]
    memory: list[str] = []
    if gpu_memory_utilization not in (None, ""):
        try:
            fraction = float(gpu_memory_utilization)
        except (TypeError, ValueError):
            fraction = -1.0
        if not 0 < fraction <= 1:
            raise CanaryError(f"the canary's GPU memory utilization must be in (0, 1], found {gpu_memory_utilization!r}")
        replaced.append("--gpu-memory-utilization")
        memory = ["--gpu-memory-utilization", f"{fraction:.2f}"]
    rest = without_flags(list(argv)[1:], replaced)
    # Loopback only: the canary answers the role, never the router or clients.
    return ([str(target).rstrip("/") + "/bin/vllm"] + rest
            + ["--host", "127.0.0.1", "--port", str(canary_port), "--load-format", "dummy",
               "--hf-overrides", json.dumps(overrides, sort_keys=True)] + memory)


def systemd_run_argv(unit: str, argv: t.Sequence[str], properties: t.Mapping[str, t.Any]) -> list[str]:
    """`systemd-run` for a transient service running argv, with the unit's own settings.

    A list value gives the property once per element (DeviceAllow=...), "" an empty assignment
    as in the unit file (CapabilityBoundingSet= : no capabilities), None leaves it out.
    systemd-run hands argv over as a list (no shell, no `%` specifiers), but expands `$VAR` in
    it as in ExecStart= (the default of --expand-environment): `$` is written `$$`.
    """
    if not unit.endswith(".service"):
        unit += ".service"
    cmd = ["systemd-run", f"--unit={unit}", "--quiet"]
    for key, value in properties.items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if item is not None:
                cmd.append(f"--property={key}={item}")
    return cmd + [str(a).replace("$", "$$") for a in argv]


def canary_plan(argv: t.Sequence[str], target: str, port: t.Any, requested_layers: t.Any,
                model_config: t.Mapping[str, t.Any],
                drafter_config: t.Mapping[str, t.Any] | None = None,
                method: str | None = None, gpu_memory_utilization: t.Any = None) -> dict[str, t.Any]:
    """Everything the role needs to start the canary: argv, layers and why."""
    if not isinstance(model_config, t.Mapping):
        raise CanaryError("the checkpoint's config.json is not a JSON object")
    layers, reasons = canary_layers(model_config, requested_layers, drafter_config, method)
    canary = canary_argv(argv, target, port, model_config, layers, gpu_memory_utilization)
    _text, nested = text_config(model_config)
    return {"argv": canary, "layers": layers, "layers_reasons": reasons,
            "hf_overrides": json.loads(flag_value(canary, "--hf-overrides") or "{}"),
            "nested": nested}
