# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The node as a whole: whether it is as the last full run left it (site.yml's fast path).

_converged reads the digests of what the prepare roles converge and compares them with a record;
_inputs makes, on the controller, the digest of what a run was given.
"""
