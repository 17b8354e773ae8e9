"""ansible-test sanity on the collection, on a machine that reaches PyPI only at install time.

ansible-test runs each sanity test that needs packages in a virtual environment of its own,
made under $HOME/.ansible/test and given pip by a get-pip.py it downloads from
ci-files.testing.ansible.com. Here $HOME is .venv/ansible-test, the bootstrap is
ansible_test_get_pip.py with pip's wheel beside it, and:

  --prime     (make install-test, network allowed) makes the environments of the tests the
              suite runs (all but pylint: `ansible-test sanity --prime-venvs`), downloading
              what they need;
  --offline   (the suite) runs them with PIP_NO_INDEX: a missing environment fails rather
              than reaching the network;
  otherwise   (make sanity) runs every sanity test, pylint too, making what is missing.
Further arguments go to ansible-test sanity (--skip-test pylint, say).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLLECTION = ROOT / "ansible_collections" / "gpuhost" / "stack"
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


# what the suite leaves to `make sanity`: pylint, a quarter of a minute and its own environment
SUITE = ("--skip-test", "pylint")


def pip_version() -> str:
    """The pip ansible-test puts in its environments (python_requirements.get_venv_packages)."""
    from ansible_test._internal.python_requirements import get_venv_packages

    class Python:
        version = PYTHON
    return get_venv_packages(Python())["pip"]


def home(bin_dir: Path) -> Path:
    """The HOME ansible-test runs with, its pip bootstrap in place."""
    h = bin_dir.parent / "ansible-test"
    cache = h / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    version = pip_version()
    shutil.copyfile(ROOT / "tools" / "ansible_test_get_pip.py", cache / f"get_pip_{version.replace('.', '_')}.py")
    if not list(cache.glob(f"pip-{version}-*.whl")):
        subprocess.run([str(bin_dir / "pip"), "download", "-q", "--disable-pip-version-check", "--no-deps",
                        "-d", str(cache), f"pip=={version}"], check=True)
    return h


def main(argv: list[str]) -> int:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "HOME": str(home(bin_dir)), "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
    command = [str(bin_dir / "ansible-test"), "sanity", "--python", PYTHON, "--color", "no"]
    if argv[:1] == ["--prime"]:
        command += ["--prime-venvs", *SUITE]
    elif argv[:1] == ["--offline"]:
        env["PIP_NO_INDEX"] = "1"
        command += argv[1:]
    else:
        command += argv
    return subprocess.run(command, cwd=COLLECTION, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
