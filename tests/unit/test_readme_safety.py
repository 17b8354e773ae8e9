"""Every promise in the README's Safety table names tests that exist: a renamed or deleted
test must not leave a promise proved by nothing."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def safety_rows() -> list[str]:
    text = (ROOT / "README.md").read_text()
    table = text.split("## Safety", 1)[1].split("\n## ", 1)[0]
    return [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| promise")]


def test_every_safety_promise_names_tests_that_exist():
    rows = safety_rows()
    assert len(rows) >= 25
    for row in rows:
        proof = row.rstrip(" |").rsplit(" | ", 1)[1]
        refs = re.findall(r"`([^`]+)`", proof)
        assert refs, f"a promise without a test: {row[:80]}"
        current = None
        for ref in refs:
            path, _, name = ref.partition("::")
            if path:
                matches = [p for p in ROOT.glob("tests/**/*.py") if str(p).endswith("/" + path.split("/")[-1])
                           and (p.relative_to(ROOT).as_posix() == path or "/" not in path)]
                assert matches, f"no test file {path} ({row[:60]})"
                current = matches[0]
            assert current is not None, ref
            if name:
                base = name.split("[")[0]
                assert re.search(rf"^def {re.escape(base)}\(", current.read_text(), re.M), \
                    f"{current.name} has no {base} ({row[:60]})"
