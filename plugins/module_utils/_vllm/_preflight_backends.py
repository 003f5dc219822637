# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The probe's attention-backend stage: the backends vLLM's CUDA platform would choose between
on the node's compute capability, each asked through its own `validate_configuration`, for
the target and the drafter.

Part of the probe script (_preflight_probe): written beside it and run by the ml-env's
interpreter, so stdlib at the top level, vLLM and torch inside functions, no package imports
there.
"""

from __future__ import annotations

import contextlib
import os
import sys
import typing as t

if __package__:  # a module of the collection
    from . import _preflight_stub as stub
else:  # a file beside the probe script (vllm_serve_preflight writes them together)
    import _preflight_stub as stub


def judge(probe: t.Any, cap: tuple[int, int], args: t.Any, model_config: t.Any,
          engine_config: t.Any, spec: t.Any) -> None:
    """Ask the backends vLLM's CUDA platform would pick from, for the target and drafter."""
    draft = getattr(spec, "draft_model_config", None) if spec is not None else None
    models = [("target", model_config)] + ([("drafter", draft)] if draft is not None else [])
    names = [f"attention-backend-{role}" for role, _config in models]
    try:
        cuda = _cuda_platform(probe)
    except ImportError as exc:
        for name in names:
            probe.skip(name, _no_cuda_platform(probe, exc))
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
            probe.guarded([name], _judge_model, probe, cuda, device, AttentionSelectorConfig,
                          args, selected, role, config, kv)


def _judge_model(probe: t.Any, cuda: t.Any, device: t.Any, selector_type: t.Any, args: t.Any,
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
    _judge(probe, cuda, device, selector, heads, selected, role, config, kv)


def _judge(probe: t.Any, cuda: t.Any, device: t.Any, selector: t.Any, heads: int, selected: t.Any,
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
            with _cuda_buffers_on_meta(probe):
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
        probe.check(f"attention-backend-{role}", f"{what}: {', '.join(valid)} on {where}")
        return
    # Which dtypes would work: those of the backends that pass every other test.
    usable = sorted({d for name in reasons
                     for d in _supported_dtypes(AttentionBackendEnum[name])
                     if reasons[name] == ["kv_cache_dtype not supported"]})
    fix = (f"set vllm_server_kv_cache_dtype to one of {usable} (the KV-cache dtypes of the "
           f"backends that support {where} in vLLM {probe.version}), or pin a vLLM release "
           f"whose backends take {kv} on this GPU (vllm_install_version)") if usable else \
        "choose another attention backend, KV-cache dtype or vLLM release"
    flags = ["--kv-cache-dtype"] + (["--attention-backend"] if selected else [])
    detail = "; ".join(f"{n}: {', '.join(r)}" for n, r in reasons.items())
    probe.refuse(f"attention-backend-{role}", flags,
                 f"vLLM {probe.version} has no attention backend for the {what} on {where} "
                 f"(vLLM would stop with 'No valid attention backend found'): {detail}", fix)


def _cuda_platform(probe: t.Any) -> t.Any:
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
        probe.notes.append(f"vllm.platforms.cuda imported with vllm._C stubbed ({exc})")
    return cuda


def _no_cuda_platform(probe: t.Any, exc: ImportError) -> str:
    why = f"vLLM {probe.version}'s CUDA platform module cannot be imported here ({exc})"
    if stub.DRIVER_LIBRARY.split(".", maxsplit=1)[0] not in str(exc):
        return why
    if os.environ.get(stub.STUB_ENV):
        return why + f", even with the CUDA stub library {os.environ[stub.STUB_ENV]}"
    lacking = ("cuda_stub is false" if not probe.request.get("cuda_stub", True)
               else "the env ships no CUDA stub library")
    return (why + f": no NVIDIA driver library on this machine and {lacking}; on a GPU node "
            "this check runs")


def _supported_dtypes(backend: t.Any) -> list[str]:
    try:
        return list(getattr(backend.get_class(), "supported_kv_cache_dtypes", []) or [])
    except Exception:
        return []


@contextlib.contextmanager
def _cuda_buffers_on_meta(probe: t.Any) -> t.Iterator[None]:
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
