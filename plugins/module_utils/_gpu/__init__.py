# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""What an NVIDIA GPU node says about itself, and the verdicts on it (gpu_preflight, nvidia_driver_facts).

Readers of nvidia-smi (_nvidia_smi), the driver and its kernel log (_nvidia_driver,
_nvidia_xid) and the PCI bus (_pci), gathered by _facts and judged by _verdicts against what the
inventory expects. Pure functions over text with side effects passed in, so recorded outputs
of real nodes test them. Stdlib only, Python 3.9+, no Ansible imports: it runs on the managed node.
"""
