"""tests/support/failure_digest.py on real output: a real ansible-playbook run and a real pytest
junit file, so the summary CI shows names what failed."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support import failure_digest

PLAYBOOK = textwrap.dedent("""\
    - name: A play with an ignored failure, a nested run's printed failure and a real one
      hosts: localhost
      gather_facts: false
      tasks:
        - name: Fails but is ignored
          ansible.builtin.command: /bin/false
          changed_when: false
          ignore_errors: true
        - name: Prints another run's failure
          ansible.builtin.debug:
            msg: "fatal: [other-host]: FAILED! => nested"
        - name: The task that fails
          ansible.builtin.fail:
            msg: the reason it failed
    """)


def test_ansible_digest_names_the_failing_task_only(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_NOCOLOR="0", ANSIBLE_FORCE_COLOR="1")
    run = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "play.yml"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 2, run.stdout + run.stderr
    log = tmp_path / "molecule.log"
    log.write_text(run.stdout)

    lines = list(failure_digest.ansible(str(log)))

    assert len(lines) == 1, lines
    assert lines[0].startswith("fatal [localhost] TASK [The task that fails]:")
    assert "the reason it failed" in lines[0]


def test_junit_digest_names_each_failed_test(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "def test_passes():\n    assert True\n\n"
        "def test_fails():\n    assert 1 == 2, 'one is not two'\n")
    xml = tmp_path / "out.xml"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          f"--junitxml={xml}", str(tmp_path / "test_sample.py")],
                         cwd=tmp_path, capture_output=True, text=True, check=False)
    assert run.returncode == 1, run.stdout

    lines = list(failure_digest.junit(str(xml)))

    assert len(lines) == 1, lines
    assert lines[0].startswith("FAILURE test_sample::test_fails:")
    assert "one is not two" in lines[0]


def test_a_task_name_molecule_wrapped_is_named_whole():
    """Recorded molecule output: the task line is wrapped in molecule's box."""
    lines = list(failure_digest.ansible(str(Path(__file__).with_name("molecule-wrapped-task.log"))))
    assert len(lines) == 1, lines
    assert lines[0].startswith("fatal [localhost] TASK [Both restarted drained for the model path; the second run "
                               "stopped node2's canary, nothing else]:"), lines[0]
