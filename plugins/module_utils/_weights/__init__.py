# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Model checkpoints: fetch from the Hub, manifest, stage, verify, and the checks before serving.

_hub reads the Hugging Face Hub (or a mirror), _manifest records a revision's files and hashes,
_stage makes one revision complete and verified or not visible at all (fetched by _transfer,
made visible by _publish, in the _layout they share), _verify judges a directory against its
manifest, _safetensors the size a file must have from its header, _check what vLLM needs in a
checkpoint directory, _plan the vllm_weights role's decisions. Stdlib only, Python 3.9+, no
Ansible imports: it runs on the managed node.
"""
