# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""[Service] directives of the units this collection writes: a base set plus an operator's own.

The vLLM unit (and its canary) is hardened with a base set (roles/vllm_server/vars/main.yml);
an operator adds or replaces directives through a variable. What would take the GPUs, the
network or the JIT compilers away from vLLM is refused here with the reason, before anything is
rendered: a private /dev, a device list without the NVIDIA nodes, no W+X memory, no AF_UNIX...

Stdlib only, Python 3.9+, no Ansible imports.
"""

from __future__ import annotations

import fnmatch
import re
import textwrap
import typing as t

_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_TRUE = ("1", "yes", "y", "true", "t", "on")

# The device groups (/proc/devices) of the NVIDIA nodes CUDA opens: major 195 is "nvidia" with
# current drivers (/dev/nvidia0..7, /dev/nvidiactl; older ones named it "nvidia-frontend"),
# /dev/nvidia-uvm and /dev/nvidia-uvm-tools are "nvidia-uvm", /dev/nvidia-caps/* "nvidia-caps".
NVIDIA_GROUPS = ("nvidia", "nvidia-uvm", "nvidia-caps")
# What DevicePolicy=closed adds by itself and strict does not (Python and CUDA open them).
PSEUDO_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
# Address families vLLM cannot serve without, and why.
NEEDED_FAMILIES = {
    "AF_UNIX": "vLLM's API server talks to its engine and workers over ZMQ ipc:// sockets, and "
               "NCCL passes CUDA memory handles between GPU workers over UNIX sockets",
    "AF_INET": "the OpenAI API listens on it, and torch.distributed/Gloo rendezvous on 127.0.0.1",
    "AF_NETLINK": "NCCL and Gloo list the network interfaces (getifaddrs) at start",
}


class DirectiveError(ValueError):
    """A directive that cannot be rendered, or would break vLLM; the message says which and why."""


def _text(name: str, value: t.Any, variable: str) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float, str)):
        text = str(value)
        if "\n" in text or "\r" in text or "\0" in text:
            raise DirectiveError("%s: %s has a line break or NUL byte in its value %r"
                                 % (variable, name, text))
        return text
    raise DirectiveError("%s: %s must be a string, number, boolean or a list of them (one line "
                         "each), not %s" % (variable, name, type(value).__name__))


def normalize(directives: t.Mapping[str, t.Any], variable: str) -> dict[str, list[str]]:
    """name -> the values of its lines; a list gives one line per element, None drops it."""
    if not isinstance(directives, t.Mapping):
        raise DirectiveError("%s must be a dict of directive name -> value, not %s"
                             % (variable, type(directives).__name__))
    out: dict[str, list[str]] = {}
    for name, value in directives.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise DirectiveError("%s: %r is not a systemd directive name (such as "
                                 "ProtectHome)" % (variable, name))
        if value is None:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        out[name] = [_text(name, item, variable) for item in values]
    return out


def _last(directives: t.Mapping[str, list[str]], name: str) -> str | None:
    values = directives.get(name)
    return values[-1].strip() if values else None


def _true(value: str | None) -> bool:
    return value is not None and value.lower() in _TRUE


def _device_refusal(directives: t.Mapping[str, list[str]]) -> str:
    policy = (_last(directives, "DevicePolicy") or "auto").lower()
    allows: list[tuple[str, str]] = []
    for value in directives.get("DeviceAllow", []):
        if not value.strip():
            allows = []  # an empty assignment resets the list
            continue
        spec, _sep, access = value.strip().partition(" ")
        allows.append((spec, access.strip() or "rwm"))
    if policy == "auto" and not allows:
        return ""
    usable = [(spec, access) for spec, access in allows if "r" in access and "w" in access]
    missing = [group for group in NVIDIA_GROUPS
               if not any(spec.startswith("char-") and fnmatch.fnmatchcase(group, spec[5:])
                          for spec, _access in usable)]
    if policy == "strict":
        missing += [path for path in PSEUDO_DEVICES
                    if not any(spec == path or spec == "char-mem" for spec, _access in usable)]
    if not missing:
        return ""
    return ("DevicePolicy=%s with DeviceAllow=%s leaves out %s: CUDA opens /dev/nvidiactl, "
            "/dev/nvidia0..7, /dev/nvidia-uvm(-tools) and /dev/nvidia-caps/* read-write, so vLLM "
            "would find no GPU. Allow them by their /proc/devices groups, which also cover nodes "
            "created after the start: DeviceAllow=char-nvidia rw, char-nvidia-uvm rw and "
            "char-nvidia-caps rw%s"
            % (policy, " ".join(spec + " " + access for spec, access in allows) or "(nothing)",
               ", ".join(missing),
               " (strict also needs /dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom)"
               if policy == "strict" else ""))


def _family_refusal(directives: t.Mapping[str, list[str]]) -> str:
    allowed: set[str] = set()
    denied: set[str] = set()
    restricted = False
    for value in directives.get("RestrictAddressFamilies", []):
        words = value.split()
        if not words:
            allowed, denied, restricted = set(), set(), False  # reset: no restriction
        elif words == ["none"]:
            allowed, denied, restricted = set(), set(), True
        elif words[0].startswith("~"):
            denied |= {words[0][1:], *words[1:]}
        else:
            allowed |= set(words)
            restricted = True
    lost = [family for family in NEEDED_FAMILIES
            if family in denied or (restricted and family not in allowed)]
    return "; ".join("RestrictAddressFamilies takes away %s, which vLLM needs: %s"
                     % (family, NEEDED_FAMILIES[family]) for family in lost)


def refusals(directives: t.Mapping[str, list[str]]) -> list[str]:
    """Why these directives would break vLLM on GPUs (empty when they would not)."""
    found = []
    if _true(_last(directives, "PrivateDevices")):
        found.append("PrivateDevices=yes gives vLLM a /dev without /dev/nvidia*: CUDA would find "
                     "no GPU (restrict devices with DevicePolicy=closed and DeviceAllow=char-nvidia "
                     "rw, char-nvidia-uvm rw, char-nvidia-caps rw instead)")
    found.append(_device_refusal(directives))
    if _true(_last(directives, "MemoryDenyWriteExecute")):
        found.append("MemoryDenyWriteExecute=yes forbids memory that is writable and executable, "
                     "which CUDA's PTX JIT, triton and torch.compile (inductor) kernels are loaded "
                     "into: vLLM would fail at its first compiled kernel")
    found.append(_family_refusal(directives))
    if _true(_last(directives, "PrivateNetwork")):
        found.append("PrivateNetwork=yes leaves vLLM only its own loopback: clients and the "
                     "routers could not reach its port")
    if (_last(directives, "ProcSubset") or "all").lower() == "pid":
        found.append("ProcSubset=pid hides /proc/driver/nvidia (CUDA reads the driver's "
                     "parameters there) and /proc/meminfo and /proc/cpuinfo (torch and vLLM size "
                     "their buffers from them)")
    limit = _last(directives, "LimitMEMLOCK")
    if limit is not None and limit.lower() not in ("infinity", "infinity:infinity"):
        found.append("LimitMEMLOCK=%s: NCCL and CUDA lock their host buffers in memory (pinned "
                     "memory), so it stays infinity (gpu_node sets the same limit for sessions)"
                     % limit)
    return [reason for reason in found if reason]


def merge(base: t.Sequence[t.Mapping[str, t.Any]], extra: t.Mapping[str, t.Any],
          variable: str, gpu: bool) -> list[tuple[str, list[str], str]]:
    """(name, values, why) of the base directives in order, an extra one replacing the base's
    directive of the same name, then the extra ones the base does not have.

    base: [{'name': .., 'value': .., 'why': ..}] (why optional). gpu: refuse what breaks vLLM.
    """
    added = normalize(extra, variable)
    out = []
    for item in base:
        name = str(item["name"])
        if name in added:
            out.append((name, added.pop(name), "replaced by %s" % variable))
        else:
            out.append((name, normalize({name: item["value"]}, "the role's hardening")[name],
                        str(item.get("why") or "")))
    out += [(name, values, "added by %s" % variable) for name, values in added.items()]
    if gpu:
        problems = refusals({name: values for name, values, _why in out})
        if problems:
            raise DirectiveError("%s: refused, this would break vLLM on its GPUs: %s. Nothing "
                                 "was rendered." % (variable, " -- ".join(problems)))
    return out


def unit_lines(base: t.Sequence[t.Mapping[str, t.Any]], extra: t.Mapping[str, t.Any],
               variable: str, gpu: bool = True) -> list[str]:
    """The unit file's lines: '# why' before a directive that has one, then Name=value."""
    lines = []
    for name, values, why in merge(base, extra, variable, gpu):
        lines += ["# " + line for line in textwrap.wrap(why, 96)]
        lines += ["%s=%s" % (name, value) for value in values]
    return lines


def properties(base: t.Sequence[t.Mapping[str, t.Any]], extra: t.Mapping[str, t.Any],
               variable: str, gpu: bool = True) -> dict[str, t.Any]:
    """The same directives for systemd-run --property (a list where there are several lines)."""
    return {name: values if len(values) > 1 else values[0]
            for name, values, _why in merge(base, extra, variable, gpu) if values}
