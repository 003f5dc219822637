# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Python environments: the side-by-side env store, facts read from an env, who may change it.

_store names, lays out and switches the content-addressed envs (ml_env_* modules, the ml_env
filter); _pyenv reads an interpreter's facts without importing anything installed in it and
runs every interpreter root runs isolated (-I -B, no PYTHON* variables) after refusing one that
another user could change; _protect gives env trees to one owner; _wheelhouse describes and checks
the wheels of air-gapped hosts. Stdlib only, Python 3.9+, no
Ansible imports: it runs on the managed node.
"""
