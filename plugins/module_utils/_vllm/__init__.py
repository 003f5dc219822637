# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The vLLM server itself: its unit, its flags, its HTTP API, its journal, its preflight.

Pure logic the vllm_* modules run on the managed node and the filters run on the controller:
rendering and ranges of the vllm_server role (_server, _ranges, _net, _unit_hardening), the
unit's and the server's observed state (_unit, _journal, _http, _metrics, _nodestate), the
serve plans and the routers (_nodeplan with _nodeview and _nodereport, _fleet, _drain, _canary)
and the serve preflight (_preflight, _preflight_cache; _preflight_probe with its stages
_preflight_backends and _preflight_stub, and _preflight_key, are also run on their own as
scripts by the ml-env's interpreter, so they import nothing but each other, by file name
there). Stdlib only, Python 3.9+, no Ansible imports.
"""
