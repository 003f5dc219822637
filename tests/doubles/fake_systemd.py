"""TEST DOUBLES of `systemctl show` and `journalctl` for one process, for unit tests and benchmarks.

`make_fake_systemd(bin_dir)` writes executable `systemctl` and `journalctl` scripts into bin_dir.
Put bin_dir first on PATH and set FAKE_SYSTEMD_PIDFILE (pid of the watched process, e.g. the
fake vLLM server double) and FAKE_SYSTEMD_LOG (its captured stdout/stderr):
- `systemctl show UNIT --property=...` says active/running while the pid lives, failed after;
- `journalctl ...` prints the log file.
The real commands are exercised by the molecule scenario in a systemd container.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

SYSTEMCTL = r'''#!{python}
"""TEST DOUBLE of systemctl show (see tests/doubles/fake_systemd.py)."""
import os, sys
pid = int(open(os.environ["FAKE_SYSTEMD_PIDFILE"]).read().strip() or 0)
alive = False
try:
    with open(f"/proc/{{pid}}/stat") as handle:
        alive = handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
except (OSError, IndexError):
    alive = False
if sys.argv[1:2] != ["show"]:
    sys.exit("fake systemctl: only 'show' is implemented")
state = (dict(ActiveState="active", SubState="running", MainPID=str(pid), ExecMainStatus="0",
              Result="success") if alive else
         dict(ActiveState="failed", SubState="failed", MainPID="0", ExecMainStatus="1",
              Result="exit-code"))
state.update(NRestarts="0", ExecMainCode="1", ExecMainStartTimestampMonotonic="0", LoadState="loaded",
             InvocationID="0123456789abcdef0123456789abcdef")
for key, value in state.items():
    print(f"{{key}}={{value}}")
'''

JOURNALCTL = r'''#!{python}
"""TEST DOUBLE of journalctl (see tests/doubles/fake_systemd.py): prints the captured log."""
import os, sys
with open(os.environ["FAKE_SYSTEMD_LOG"], errors="replace") as handle:
    sys.stdout.write(handle.read())
'''


def make_fake_systemd(bin_dir: Path) -> Path:
    """Write the two doubles into bin_dir and return it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("systemctl", SYSTEMCTL), ("journalctl", JOURNALCTL)):
        path = bin_dir / name
        path.write_text(text.format(python=sys.executable), encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


if __name__ == "__main__":
    print(make_fake_systemd(Path(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())))
