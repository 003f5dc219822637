"""What an attacker running as the service user would plant, run on a test node (molecule).

    runuser -u vllm -- python3 -I plant_startup_code.py MARKERS PYTHON...

For every interpreter given, asks it (as this user, as the service would run it: user site on)
for its sys.path and user site, then tries to put start-up code in each folder: a .pth file
(Python runs its import lines at every start) and a json.py (imported instead of the standard
one where the folder comes first, as a working directory does). The planted code drops a file
named uid-<uid>-pid-<pid> into MARKERS when it runs, so a test can see who ran it. Also tries to
change a file of each virtual environment. Prints JSON: {"planted": [...], "refused": {path:
error}, "changed_env_file": [...]}; plants nothing where it cannot, and never raises for that.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import subprocess
import sys

ASK = "import json, site, sys; print(json.dumps([p for p in sys.path if p] + [site.getusersitepackages()]))"


def payload(markers: str) -> str:
    """One line of Python that leaves a marker naming who ran it (and never fails)."""
    return ("import os; os.access(%r, os.W_OK) and open(os.path.join(%r, 'uid-%%d-pid-%%d' "
            "%% (os.getuid(), os.getpid())), 'w').close()\n" % (markers, markers))


def plant(folder: str, markers: str, report: dict) -> None:
    try:
        os.makedirs(folder, exist_ok=True)  # the user site need not exist yet
        for name in ("gpuserve-planted.pth", "json.py"):
            with open(os.path.join(folder, name), "x", encoding="utf-8") as handle:
                handle.write(payload(markers))
        report["planted"].append(folder)
    except OSError as exc:
        report["refused"][folder] = errno.errorcode.get(exc.errno or 0, str(exc))


def change_env_file(python: str, report: dict) -> None:
    """Append to a file of the interpreter's venv (its pyvenv.cfg and a package's __init__.py)."""
    prefix = os.path.dirname(os.path.dirname(python))
    targets = [os.path.join(prefix, "pyvenv.cfg")]
    targets += sorted(glob.glob(os.path.join(prefix, "lib", "python*", "site-packages", "*", "__init__.py")))[:1]
    for target in targets:
        try:
            with open(target, "a", encoding="utf-8") as handle:
                handle.write("")
            report["changed_env_file"].append(target)
        except OSError as exc:
            report["refused"][target] = errno.errorcode.get(exc.errno or 0, str(exc))


def main() -> None:
    markers, pythons = sys.argv[1], sys.argv[2:]
    report: dict = {"planted": [], "refused": {}, "changed_env_file": [], "working_dir": os.getcwd()}
    folders = [os.getcwd()]
    for python in pythons:
        found = subprocess.run([python, "-c", ASK], capture_output=True, text=True, check=True)
        folders += json.loads(found.stdout)
        if os.path.isfile(os.path.join(os.path.dirname(os.path.dirname(python)), "pyvenv.cfg")):
            change_env_file(python, report)
    for folder in dict.fromkeys(os.path.realpath(f) for f in folders if not f.endswith(".zip")):
        plant(folder, markers, report)
    print(json.dumps(report, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
