"""Every plugin of the collection has documentation ansible-doc shows: each module, each
action plugin (the two without a module of their own through a doc stub, as
community.general does), each filter (a YAML file beside the filters' module); every
example parses as YAML."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_collections.gpuhost.stack.plugins.filter.gpuhost import FilterModule

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "ansible_collections/gpuhost/stack/plugins"


def docs(kind: str, names: list[str]) -> dict:
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(ROOT), "PYTHONWARNINGS": "ignore", "ANSIBLE_NOCOLOR": "1"}
    run = subprocess.run([str(Path(sys.executable).parent / "ansible-doc"), "--json", "-t", kind,
                          *[f"gpuhost.stack.{n}" for n in names]], capture_output=True, text=True, env=env, timeout=300,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 0 and "[ERROR]" not in run.stderr, run.stderr[-2000:]
    return json.loads(run.stdout)


def test_every_module_and_action_plugin():
    names = sorted({p.stem for d in ("modules", "action") for p in (PLUGINS / d).glob("*.py") if p.stem != "__init__"})
    assert {"audit", "check_inventory", "lock", "measure", "facts"} <= set(names)
    got = docs("module", names)
    assert sorted(k.split(".")[-1] for k in got) == names
    for name, entry in got.items():
        doc = entry["doc"]
        assert doc["short_description"] and doc["description"], name
        assert yaml.safe_load(entry["examples"]), f"{name}: no example"
        assert entry["return"] is not None or name.endswith(("lock", "check_inventory")), f"{name}: no RETURN"


def test_every_filter():
    names = sorted(FilterModule().filters())
    got = docs("filter", names)
    assert sorted(k.split(".")[-1] for k in got) == names
    for name, entry in got.items():
        assert entry["doc"]["short_description"] and entry["doc"]["options"]["_input"], name
        assert yaml.safe_load(entry["examples"]) and entry["return"]["_value"], name
