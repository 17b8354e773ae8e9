"""The README works verbatim: in a fresh clone, `make audit` (the first of its two commands)
installs and audits this machine, and the quick start's lines, run exactly as written, end
as their comments say. Offline: pip installs from the wheels `make install-test` kept.

The quick start brings up the seed host and its container and fixes them: the seed's whole
fix is checked around its lines (test_seed.SeedFix), so the seed is converged once for both."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, LabHandle
from test_seed import SeedFix

WHEELHOUSE = Path(sys.executable).parents[1] / "wheelhouse"


def block(readme: str, heading: str) -> list[str]:
    """The lines of the first ```sh block under *heading*."""
    section = readme.split(f"## {heading}\n", 1)[1]
    code = re.search(r"```sh\n(.*?)```", section, re.S)
    assert code, heading
    return [line for line in code.group(1).splitlines() if line.strip()]


def test_the_readme_two_commands_and_quick_start_work_verbatim_and_fix_the_seed(tmp_path):
    readme = (ROOT / "README.md").read_text()
    two = block(readme, "Two commands")
    assert [line.split("#")[0].strip() for line in two] == ["make audit", "make test"]
    assert "make test" in (ROOT / ".ci/run").read_text(), "the second command is what CI runs"
    # a plain clone with nothing beside it, as a newcomer has it
    work = tmp_path / "work"
    work.mkdir()
    clone = work / "gpuhost"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    assert sorted(p.name for p in work.iterdir()) == ["gpuhost"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV", "ANSIBLE_", "GPUHOST_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(WHEELHOUSE),
               PIP_DISABLE_PIP_VERSION_CHECK="1", HOME=str(tmp_path / "home"), NO_COLOR="1", COLUMNS="100")

    def sh(line: str, timeout: int = 900) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", line], cwd=clone, env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    audit = sh(two[0])
    assert audit.returncode == 0, audit.stdout[-2000:] + audit.stderr[-2000:]
    assert re.search(r"^audit: 1 host, ", audit.stdout, re.M), audit.stdout[-2000:]
    assert (clone / "gpuhost-report.json").is_file()
    # the quick start, line by line, each as its comment says
    quick = block(readme, "Trying it on the seed host in a minute")
    seed = None
    try:
        for line in quick:
            command = line.split("#", 1)[0].split()[1:3]      # ["lab", "up"], ["fix", "-i"] ...
            if command == ["lab", "down"]:
                seed.kept()             # before the lab goes: a second fix, a reboot
            run = sh(line)
            said = line.split("#", 1)[1] if "#" in line else ""
            code = re.search(r"exit (\d)", said)
            assert run.returncode == (int(code.group(1)) if code else 0), \
                f"{line}\n{run.stdout[-2500:]}\n{run.stderr[-2500:]}"
            if m := re.search(r"(\d+) passed(, \d+ skipped)?", said):
                assert m.group(0) in run.stdout + run.stderr, run.stdout[-2000:]
            if m := re.search(r"(\w+) findings", said):
                words = {"nine": 9, "ten": 10}
                assert f"{words.get(m.group(1), m.group(1))} drift" in run.stdout, run.stdout[-2000:]
            if "--html" in line:
                assert (clone / line.split("--html")[1].split()[0]).is_file()
            if command == ["lab", "up"]:
                seed = SeedFix(LabHandle(clone / ".lab", clone / ".lab/inventory.yml"))
            elif command[0] == "fix":
                seed.fixed(json.loads((clone / "gpuhost-report.json").read_text()))
            elif command[0] == "audit":
                seed.audited(json.loads((clone / "gpuhost-report.json").read_text()))
            elif command[0] == "verify":
                seed.verified(run.stdout)
        assert seed is not None, "the quick start brings up the seed"
    finally:
        sh(".venv/bin/gpuhost lab down --dir .lab", timeout=120)
