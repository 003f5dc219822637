# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""The fleet seen from outside: Prometheus' scrape targets (_targets) and the fleet status table (_status).

Pure functions over plain data (what the inventory and the read modules say), table-tested.
Stdlib only, Python 3.9+, no Ansible imports: the filters run them on the controller.
"""
