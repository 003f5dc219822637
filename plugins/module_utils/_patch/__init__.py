# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""python_patch's run around the _pyedit engine: plan, check, write all or nothing, roll back.

_pyedit turns source text into source text; this package owns everything about the files on
disk: _run drives one call (lock, recover what a killed run left, plan, check, write), _plan
reads each file and runs the engine, _check runs the compile/validate/import checks in their
own processes, _txn is the crash-safe multi-file transaction and its journal, _files the
records, locks, backups and atomic writes. Kept apart from _pyedit so the engine stays pure.
Stdlib only, Python 3.9+, no Ansible imports: it runs on the managed node.
"""
