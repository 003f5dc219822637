"""What root's ExecStartPre commands may load from the vLLM unit's environment."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpuserve.vllm.plugins.module_utils._vllm import _unit_boundary as ub

SERVICE = ("/var/lib/vllm", "/var/cache/vllm", "/srv/svc")


def _writable(path: str) -> str:
    """The table's node: the service user owns its home, its caches and /srv/svc; root the rest."""
    for owned in SERVICE:
        if path == owned or path.startswith(owned + "/"):
            return f"{owned} is owned by vllm (uid 990)"
    return ""


def _folder_writable(path: str) -> str:
    """As _writable, and /opt/libs holds a library the service user owns."""
    return _writable(path) or ("/opt/libs/libx.so is owned by vllm (uid 990)" if path == "/opt/libs" else "")


def _problems(env: dict[str, str]) -> list[str]:
    return ub.root_command_problems(env, _writable, _folder_writable, "vllm_server_env")


@pytest.mark.parametrize("env", [
    {},
    # the role's own environment: caches and bytecode in the service's directory, not loaded by root
    {"PYTHONPYCACHEPREFIX": "/var/cache/vllm/pycache", "VLLM_CACHE_ROOT": "/var/cache/vllm/vllm",
     "HF_HOME": "/var/cache/vllm/huggingface", "NCCL_P2P_DISABLE": "1"},
    # python3 -I ignores every PYTHON* variable; nothing else root runs there is Python
    {"PYTHONPATH": "/var/lib/vllm", "PYTHONHOME": "/srv/svc", "PYTHONSTARTUP": "/srv/svc/x.py"},
    {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
    {"LD_PRELOAD": "libjemalloc.so.2"},  # a bare name: looked up on the loader's search path
    {"LD_PRELOAD": "/usr/lib/a.so /usr/lib/b.so:/usr/lib/c.so"},
    {"LD_PRELOAD": "/usr/lib/a.so  /usr/lib/b.so "},  # empty entries between libraries: nothing
    {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"},
    {"LD_LIBRARY_PATH": ""},  # empty: unset for the loader
    {"OPENSSL_CONF": "/etc/ssl/openssl.cnf", "GCONV_PATH": "/usr/lib/gconv"},
    {"LD_BIND_NOW": "1", "LD_DEBUG": "libs"},  # no path: nothing loaded from another user
    {"CUDA_VISIBLE_DEVICES": "/var/lib/vllm"},  # not read by root's commands
])
def test_what_root_loads_only_from_root(env: dict[str, str]) -> None:
    assert _problems(env) == []


@pytest.mark.parametrize(("env", "expected"), [
    ({"LD_PRELOAD": "/var/lib/vllm/evil.so"},
     "LD_PRELOAD=/var/lib/vllm/evil.so (vllm_server_env): /var/lib/vllm is owned by vllm (uid 990). "
     "The unit runs commands as root before every start of vLLM with its environment, and the dynamic "
     "loader loads these libraries into every root command"),
    ({"LD_PRELOAD": "/usr/lib/a.so /srv/svc/b.so"}, "LD_PRELOAD=/usr/lib/a.so /srv/svc/b.so (vllm_server_env): /srv/svc is owned"),
    ({"LD_PRELOAD": "lib/evil.so"}, "lib/evil.so is relative: ExecStartPre runs in the service user's home"),
    ({"LD_AUDIT": "/var/cache/vllm/audit.so"}, "LD_AUDIT=/var/cache/vllm/audit.so (vllm_server_env): /var/cache/vllm is owned"),
    ({"LD_LIBRARY_PATH": "/usr/lib:/var/cache/vllm/lib"}, "LD_LIBRARY_PATH=/usr/lib:/var/cache/vllm/lib (vllm_server_env): /var/cache/vllm"),
    ({"LD_LIBRARY_PATH": "/usr/lib::/usr/lib64"}, "an empty entry means the working directory (the service user's home)"),
    ({"LD_LIBRARY_PATH": "/usr/lib:"}, "an empty entry means the working directory"),
    ({"LD_LIBRARY_PATH": "$ORIGIN/../lib"}, "holds a $ token the loader expands"),
    ({"LD_LIBRARY_PATH": "/opt/libs"}, "/opt/libs/libx.so is owned by vllm (uid 990)"),  # an entry in a root folder
    ({"GCONV_PATH": "/srv/svc/gconv"}, "glibc loads character set converters"),
    ({"OPENSSL_CONF": "/var/lib/vllm/openssl.cnf"}, "OpenSSL reads this configuration"),
    ({"OPENSSL_MODULES": "/opt/libs"}, "OpenSSL loads provider modules"),
    ({"BASH_ENV": "/var/lib/vllm/.bashrc"}, "a bash /bin/sh runs this file before nvidia-modprobe"),
    ({"ENV": "profile"}, "profile is relative"),
    ({"LD_DEBUG_OUTPUT": "/var/lib/vllm/ld"}, "the dynamic loader writes its debug output here, as root"),
])
def test_a_path_the_service_user_could_change_is_refused(env: dict[str, str], expected: str) -> None:
    problems = _problems(env)
    assert len(problems) == 1, problems
    assert expected in problems[0], problems[0]
    name = next(iter(env))
    assert problems[0].endswith(f"Point {name} only at root-owned files in folders only root can write, or leave it out")


def test_every_refusal_is_listed_in_name_order() -> None:
    problems = _problems({"LD_PRELOAD": "/srv/svc/a.so", "BASH_ENV": "/srv/svc/rc", "PATH": "/srv/svc"})
    assert [p.split("=", 1)[0] for p in problems] == ["BASH_ENV", "LD_PRELOAD"]


@pytest.mark.parametrize(("extra", "env", "files"), [
    ({}, {}, []),
    ({"Environment": 'LD_PRELOAD=/srv/svc/a.so "GCONV_PATH=/a b" X'}, {"LD_PRELOAD": "/srv/svc/a.so", "GCONV_PATH": "/a b"}, []),
    ({"Environment": ["A=1", "B='two words'"]}, {"A": "1", "B": "two words"}, []),
    ({"EnvironmentFile": ["-/etc/default/vllm", "/etc/vllm/more.env"]}, {}, ["/etc/default/vllm", "/etc/vllm/more.env"]),
    ({"Nice": 5}, {}, []),
])
def test_extra_environment(extra: dict, env: dict, files: list) -> None:
    assert ub.extra_environment(extra) == (env, files)


@pytest.mark.parametrize("name", sorted(ub.ROOT_LOADED))
def test_the_judged_id_follows_every_judged_variable_and_nothing_else(name: str) -> None:
    """A read judged the run's environment when the ids match: any change of a variable the
    judgement reads (each root-loaded name, unit_extra) changes the id; a line it does not read
    (the API key, a token, a cache) does not, so that line's secret never reaches the digest."""
    base = ['HF_TOKEN="hf_secret"', 'VLLM_API_KEY="k1"', f'{name}="/usr/lib/a"']
    judged = ub.judged_id(base, {})
    assert ub.judged_id(['HF_TOKEN="other"', 'VLLM_API_KEY="k2"', f'{name}="/usr/lib/a"', 'X="1"'], {}) == judged
    assert ub.judged_id(['HF_TOKEN="hf_secret"', 'VLLM_API_KEY="k1"', f'{name}="/usr/lib/b"'], {}) != judged
    assert ub.judged_id(base[:2], {}) != judged
    assert ub.judged_id(base, {"Environment": f"{name}=/usr/lib/a"}) != judged
    assert ub.judged_id(base, {"EnvironmentFile": "-/etc/vllm/extra.env"}) != judged


def test_the_judged_id_of_lines_judge_refuses_is_stable_and_names_no_line() -> None:
    """judge() refuses a line that is not NAME=value (naming only its number); the id of such
    lines is one value, the same on the controller and in the read, and never raises."""
    assert ub.judged_id(["not a line", 'VLLM_API_KEY="k1"'], {}) == ub.judged_id(["also not one"], {})
    assert ub.judged_id(["not a line"], {}) != ub.judged_id([], {})


_NAMES = st.sampled_from(sorted(ub.ROOT_LOADED) + ["VLLM_API_KEY", "HF_TOKEN", "PYTHONPATH", "NCCL_DEBUG"])
_VALUES = st.sampled_from(["/usr/lib/a.so", "/var/cache/vllm/x.so", "/opt/libs", "rel.so", "", "/usr/lib:/srv/svc"])
_ENVS = st.dictionaries(_NAMES, _VALUES, max_size=5)
_EXTRAS = st.sampled_from([{}, {"Environment": "LD_PRELOAD=/srv/svc/p.so"}, {"EnvironmentFile": "-/srv/svc/extra.env"},
                           {"Environment": "NCCL_DEBUG=INFO"}])


def _lines(env: dict[str, str]) -> list[str]:
    return [f'{name}="{value}"' for name, value in sorted(env.items())]


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(_ENVS, _ENVS, _EXTRAS, _EXTRAS)
def test_one_judged_id_means_one_verdict(env_a: dict, env_b: dict, extra_a: dict, extra_b: dict) -> None:
    """The checks trust a read's verdict when its id is the run's: two environments with one id
    must get the same verdict, whatever else (secrets included) differs between them."""
    def verdict(env: dict, extra: dict) -> tuple[list[str], list[str]]:
        return ub.judge(_lines(env), "vllm_server_env", extra, _writable, _folder_writable)
    if ub.judged_id(_lines(env_a), extra_a) == ub.judged_id(_lines(env_b), extra_b):
        assert verdict(env_a, extra_a) == verdict(env_b, extra_b)
    judged_only = {k: v for k, v in env_a.items() if k in ub.ROOT_LOADED}
    assert ub.judged_id(_lines(judged_only), extra_a) == ub.judged_id(_lines(env_a), extra_a)
