"""What an attacker running as the service user would plant, run on a test node (molecule).

    runuser -u vllm -- python3 -I plant_startup_code.py MARKERS CACHE_DIR PYTHON...

For every interpreter given, asks it (as this user, as the service would run it: user site on)
for its sys.path and user site, then tries to put start-up code in each folder: a .pth file
(Python runs its import lines at every start), a sitecustomize.py (imported at every start) and
a json.py (imported instead of the standard one where the folder comes first, as a working
directory does). In the service's caches under CACHE_DIR (the role's vllm_server_cache_dir):
for every interpreter an unchecked-hash .pyc of its json package in the PYTHONPYCACHEPREFIX
(pycache/: an interpreter started with that prefix runs it instead of json's source), a
transformers_modules package in Hugging Face's modules cache (huggingface/modules/: transformers
puts it on sys.path for remote code) and an entry in vLLM's `modelinfos` cache (vllm/modelinfos/:
data, the model class facts vLLM's registry would otherwise inspect). In the home ($HOME), a
.profile and .bashrc for shells. The planted code drops a file named uid-<uid>-pid-<pid> into
MARKERS when it runs, so a test can see who ran it. Also tries to change a file of each virtual
environment. Prints JSON: {"planted": [...], "refused": {path: error}, "changed_env_file":
[...], "files": [every file it created], "appended": [the files that were there before]} (for
a test that removes its plants); plants nothing where it cannot, and never raises for that.
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


# Run by the target interpreter: compile argv[1] (payload + json's source) to argv[2] as json's
# bytecode (argv[3]), unchecked: it is used whatever the source's mtime.
COMPILE = ("import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], dfile=sys.argv[3], "
           "doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)")
# Where the interpreter, started with the service's PYTHONPYCACHEPREFIX, looks for json's bytecode.
PYC_PATH = "import importlib.util as u; s = u.find_spec('json').origin; print(s); print(u.cache_from_source(s))"


def shell_payload(markers: str) -> str:
    """A shell line that leaves a marker naming who ran it."""
    return "[ -w %s ] && : > %s/uid-$(id -u)-pid-$$\n" % (markers, markers)


def write_files(files: dict, report: dict, key: str, mode: str = "x") -> None:
    """Create each path with its content (and its folder), or append with mode "a"; report key
    as planted, or the error."""
    try:
        for path, content in files.items():
            os.makedirs(os.path.dirname(path), exist_ok=True)  # the user site need not exist yet
            existed = os.path.exists(path)
            with open(path, mode, encoding="utf-8") as handle:
                handle.write(content)
            report["appended" if existed else "files"].append(path)
        report["planted"].append(key)
    except OSError as exc:
        report["refused"][key] = errno.errorcode.get(exc.errno or 0, str(exc))


def plant(folder: str, markers: str, report: dict) -> None:
    names = ("gpuserve-planted.pth", "sitecustomize.py", "json.py")
    write_files({os.path.join(folder, name): payload(markers) for name in names}, report, folder)


def plant_bytecode(python: str, prefix: str, markers: str, report: dict) -> None:
    """An unchecked .pyc of python's json package in the service's pycache prefix."""
    found = subprocess.run([python, "-I", "-X", "pycache_prefix=" + prefix, "-c", PYC_PATH],
                           capture_output=True, text=True, check=True).stdout.split("\n")
    source, pyc = found[0], found[1]
    if pyc in report["planted"]:
        return  # another interpreter of the same installation: the same bytecode file
    planted = os.path.join(prefix, "planted-json-%d.py" % len(report["planted"]))
    with open(source, encoding="utf-8") as handle:
        write_files({planted: payload(markers) + handle.read()}, report, pyc)
    if pyc in report["planted"]:
        subprocess.run([python, "-I", "-c", COMPILE, planted, pyc, source], check=True)
        report["files"].append(pyc)


def plant_caches(cache_dir: str, home: str, markers: str, report: dict) -> None:
    """Hugging Face's modules cache, vLLM's modelinfos cache and the home's shell start-up files."""
    modules = os.path.join(cache_dir, "huggingface", "modules", "transformers_modules")
    write_files({os.path.join(modules, "__init__.py"): payload(markers)}, report, modules)
    entry = os.path.join(cache_dir, "vllm", "modelinfos", "vllm-model_executor-models-llama-LlamaForCausalLM.json")
    write_files({entry: json.dumps({"hash": "planted", "modelinfo": {"planted_by": os.getuid()}})}, report, entry)
    for name in (".profile", ".bashrc"):
        write_files({os.path.join(home, name): shell_payload(markers)}, report, os.path.join(home, name), "a")


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
    markers, cache_dir, pythons = sys.argv[1], sys.argv[2], sys.argv[3:]
    report: dict = {"planted": [], "refused": {}, "changed_env_file": [], "files": [], "appended": [], "working_dir": os.getcwd()}
    folders = [os.getcwd()]
    for python in pythons:
        found = subprocess.run([python, "-c", ASK], capture_output=True, text=True, check=True)
        folders += json.loads(found.stdout)
        if os.path.isfile(os.path.join(os.path.dirname(os.path.dirname(python)), "pyvenv.cfg")):
            change_env_file(python, report)
        plant_bytecode(python, os.path.join(cache_dir, "pycache"), markers, report)
    for folder in dict.fromkeys(os.path.realpath(f) for f in folders if not f.endswith(".zip")):
        plant(folder, markers, report)
    plant_caches(cache_dir, os.environ["HOME"], markers, report)
    print(json.dumps(report, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
