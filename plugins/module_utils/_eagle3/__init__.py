# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""EAGLE-3 with a Kimi-K2.5 target: what the installed vLLM needs, and the eagle3_patches report.

_facts decides, without importing vLLM, what the installation needs (vllm_eagle3_facts);
_report turns those facts and python_patch's results into the role's inputs and its report
(the eagle3_patches filter, on the controller). Stdlib only, Python 3.9+, no Ansible imports.
"""
