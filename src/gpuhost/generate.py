"""Everything in the tree that is made from the controls' declarations, made in one place.

The controls' modules (plugins/module_utils/controls/<id>.py) are the one source of a
control's catalog entry, parameters, watched sysctls and units, and role. From them come:
the probe's watch lists, every role's task files, defaults, argument specs and README,
the play's list of roles, docs/controls.md and the control tables of the collection's README
and (in a checkout) the project's. `artefacts()`
says what each file must hold; `make generate` (or `python -m gpuhost.generate`)
writes them, `--check` lists what is stale; tests/unit/test_generated.py fails while
anything is.
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import DEFAULT_REGISTRY, Registry

MARK = "Made by make generate from the controls' declarations; a test fails while it is stale."
README_BEGIN = "<!-- controls table: made by make generate -->"
README_END = "<!-- end of the controls table -->"
# from the collection's root: the project's own README, in a checkout (a wheel has none)
PROJECT_README = "../../../README.md"
VARIABLES_BEGIN = "<!-- variables: made by make generate -->"
VARIABLES_END = "<!-- end of the variables -->"


def module_name(cid: str) -> str:
    return cid.replace(".", "_")


def _yaml(data) -> str:
    import yaml

    class Indented(yaml.SafeDumper):
        """Sequences indented under their key, as yamllint wants."""
        def increase_indent(self, flow=False, indentless=False):
            return super().increase_indent(flow, False)

    return yaml.dump(data, Dumper=Indented, sort_keys=False, width=110)


def _option(p, registry: Registry) -> dict:
    o: dict = {"type": p.type}
    if p.elements:
        o["elements"] = p.elements
    if p.choices:
        o["choices"] = list(p.choices)
    o["default"] = p.default
    o["description"] = p.doc
    return o


def watchlist(registry: Registry) -> str:
    def tup(items) -> str:
        inner = ", ".join(json.dumps(i) for i in items)
        return f"({inner},)" if len(items) == 1 else f"({inner})"

    units = tup(registry.units)
    if len(units) > 100:
        parts, line, lines = [json.dumps(u) for u in registry.units], "", []
        for part in parts:
            if line and len(line) + len(part) + 2 > 100:
                lines.append(line + ",")
                line = part
            else:
                line = f"{line}, {part}" if line else part
        lines.append(line)
        units = "(" + "\n               ".join(lines) + ")"
    return (f"# {MARK}\n# The probe reads these back on every host.\n"
            '"""What the probe reads back for the controls: their sysctls (CONTROL.sysctls) and their\n'
            'systemd units (CONTROL.units)."""\n\n'
            f"WATCHED_SYSCTLS = {tup(registry.sysctls)}\nOWNED_UNITS = {units}\n")


def common_argument_specs(registry: Registry) -> str:
    spec = {"argument_specs": {"main": {
        "short_description": "Read the host and judge every gpuhost control.",
        "description": [
            "One task per host (the action gpuhost.stack.audit): the facts module on the host, the judgement on the "
            "controller.",
            "Out: gpuhost_findings (every control's finding) and gpuhost_reboot_required (a fix waits for a boot)."],
        "options": {p.name: _option(p, registry) for p in registry.params}}}}
    return f"---\n# {MARK}\n# Every gpuhost variable: the inventory check (variables.py) reads the same declarations.\n" + _yaml(spec)


def role_argument_specs(role: str, registry: Registry) -> str:
    ids = ", ".join(c.id for c in registry.catalog if c.role == role)
    spec = {"argument_specs": {"main": {
        "short_description": f"Fix gpuhost's {ids} where the audit found drift.",
        "description": [f"Judges the host first (gpuhost.stack.common) unless gpuhost_findings is already there, "
                        f"then fixes {ids}; gpuhost_reboot_required says whether a fix waits for a boot."],
        "options": {p.name: _option(p, registry) for p in registry.role_params(role)}}}}
    return f"---\n# {MARK}\n" + _yaml(spec)


# gpuhost's inventory variables are one namespace (gpuhost_*) that every role reads: a prefix a
# role would make an operator set one waiver list under eleven names. Said on each variable (not
# in the checkout's .ansible-lint alone), so that the built collection lints clean on its own.
NO_ROLE_PREFIX = "  # noqa: var-naming[no-role-prefix]"


def defaults(registry: Registry) -> str:
    out = ["---", f"# {MARK}",
           "# One namespace, gpuhost_*, read by every role (hence each noqa: var-naming[no-role-prefix])."]
    for p in registry.params:
        out += [f"# {line}" for line in textwrap.wrap(p.doc, 96)]
        first, *rest = _yaml({p.name: p.default}).rstrip("\n").replace("\n...", "").split("\n")
        out += [first + NO_ROLE_PREFIX, *rest]
    return "\n".join(out) + "\n"


def role_meta(role: str, registry: Registry) -> str:
    ids = ", ".join(c.id for c in registry.catalog if c.role == role)
    # folded, so a role with many controls keeps within yamllint's line length
    text = "\n".join("    " + line for line in textwrap.wrap(f"gpuhost controls: {ids}", 96))
    return ("---\ngalaxy_info:\n"
            f"  role_name: {role}\n  author: gpuhost\n  description: >-\n{text}\n"
            "  license: Apache-2.0\n  min_ansible_version: \"2.17\"\ndependencies: []\n")


def role_main(role: str, registry: Registry) -> str:
    """The role used alone: judge the host (unless an earlier role did), its controls, the reboot request."""
    return "\n".join([
        "---", f"# {role}, used alone in a playbook of its own: common judges the host first, then each",
        "# control acts on its finding (controls.yml: one task file and one tag per control).", f"# {MARK}",
        f"- name: Read and judge the host, when no earlier role did | {role}",
        "  ansible.builtin.include_role:", "    name: gpuhost.stack.common",
        "    public: true            # its defaults (gpuhost_apply, ...) and findings serve this role",
        "    apply:", "      tags: [always]", "  when: gpuhost_findings is not defined", "  tags: [always]", "",
        f"- name: Each control of the role | {role}", "  ansible.builtin.import_tasks: controls.yml", "",
        f"- name: Ask for the reboot a fix waits for | {role}", "  ansible.builtin.import_role:",
        "    name: gpuhost.stack.common", "    tasks_from: reboot_request"]) + "\n"


# a role's tasks after its last control, for what its controls' fixes share: the bios role writes
# the values its controls staged in one request to the BMC (roles/common/tasks/fix_bios.yml)
ROLE_AFTER = {"bios": ("bios_write.yml", "Write the BIOS values the fixes staged")}


def role_controls(role: str, registry: Registry) -> str:
    """The role's controls, one task file and one tag each: what site.yml's fix_all imports (it
    judged the host already and asks for the reboot once, at its end), and the role alone too."""
    out = ["---", f"# {role}: one task file and one tag per control; each acts on its finding.", f"# {MARK}"]
    for cid in [c.id for c in registry.catalog if c.role == role]:
        out += [f"- name: Control | {cid}", f"  ansible.builtin.import_tasks: {module_name(cid)}.yml",
                f"  tags: [{cid}, {role}]", ""]
    if role in ROLE_AFTER:
        tasks, title = ROLE_AFTER[role]
        # always: `--tags bios.cppc` writes what that control staged, `--skip-tags bios.nps`
        # what the others did; nothing staged, nothing is written
        out += [f"- name: {title} | {role}", f"  ansible.builtin.import_tasks: {tasks}",
                "  tags: [always]", ""]
    return "\n".join(out[:-1]) + "\n"


def control_tasks(cid: str, registry: Registry) -> str:
    c = registry.by_id[cid]
    f = f"gpuhost_findings['{cid}']"
    if not c.fixable:
        # no fix: a person acts (or, for kernel.reboot_pending, the reboot the operator allows);
        # the play says what the finding says, where it says it
        return "\n".join([
            "---", f"# {cid}: {c.title}.",
            "# No fix: a person must act; the finding says what and where.", f"# {MARK}",
            f"- name: Say what a person must do | {cid}", "  ansible.builtin.debug:",
            f"    msg: \"{{{{ {f} | dict2items | selectattr('key', 'in', ['status', 'observed', 'expected', 'message'])"
            " | items2dict }}\"",
            "  when:", f"    - {f} is defined", f"    - {f}.status in ['manual', 'pending_reboot']"]) + "\n"
    out = ["---", f"# {cid}: {c.title}.",
           f"# The judgement (plugins/module_utils/controls/{module_name(cid)}.py) says what to change; the common",
           "# fix tasks change it.", f"# {MARK}",
           f"- name: Fix | {cid}", "  ansible.builtin.include_role:", "    name: gpuhost.stack.common",
           "    tasks_from: fix", "    apply:",
           "      tags: [always]      # selected by this control's tag (or its role's), the fix runs whole",
           "  vars:", f"    gpuhost_control: {cid}", f"    __fix: \"{{{{ {f}.fix }}}}\"", "  when:",
           "    - gpuhost_apply | bool",
           "    - not (gpuhost_stop_file | default(\"\") | gpuhost.stack.stopped)   # an interrupted fix starts no new change",
           f"    - {f} is defined", f"    - {f}.status == 'drift'"]
    if c.role_tasks:
        out += ["", f"- name: After the fix | {cid}", f"  ansible.builtin.import_tasks: {c.role_tasks}"]
    return "\n".join(out) + "\n"


def fix_all(registry: Registry) -> str:
    out = ["---", "# Every role's fixes, in the order the audit dimensions are listed; each acts only on its",
           "# controls' drift findings. Static imports: `--list-tags` lists every control and",
           "# `--tags pcie.mrrs` runs that control's fix alone.", f"# {MARK}",
           "- name: Fix every control that drifted", "  block:", "    - name: Start with nothing changed",
           "      ansible.builtin.set_fact:", "        __gpuhost_changed: []", "      tags: [always]"]
    for role, title in registry.roles.items():
        if not any(c.role == role for c in registry.catalog):
            continue
        # a role whose controls have no fix (health: read-only) only says what a person must do
        verb = "Fix" if any(c.fixable for c in registry.catalog if c.role == role) else "Say what a person must do about"
        # its controls alone (tasks/controls.yml): the role's main.yml also judges the host and asks
        # for a reboot, which a play through here has done and does once at the end; each of those
        # tasks, skipped, would still cost a worker per host
        out += [f"    - name: {verb} {title}", "      ansible.builtin.import_role:", f"        name: gpuhost.stack.{role}",
                "        tasks_from: controls",
                "        rolespec_validate: false      # the inventory check validated every variable", ""]
    out[-1:] = ["  always:", "    # also after a failed fix: the report shows what the host is like now",
                "    - name: Read and judge again what changed", "      ansible.builtin.import_role:",
                "        name: gpuhost.stack.common", "        tasks_from: recheck", "",
                "    - name: Ask for the reboot a fix waits for | kernel.reboot_pending",
                "      ansible.builtin.import_role:", "        name: gpuhost.stack.common",
                "        tasks_from: reboot_request"]
    return "\n".join(out) + "\n"


def variables_table(params) -> str:
    rows = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for p in params:
        kind = p.type + (f"[{p.elements}]" if p.elements else "")
        rows.append(f"| `{p.name}` | {kind} | `{json.dumps(p.default)}` | {p.doc} |")
    return "\n".join(rows) + "\n"


def controls_table(controls) -> str:
    rows = ["| control | what it checks | fixed by gpuhost | reboot |", "|---|---|---|---|"]
    rows += [f"| `{c.id}` | {c.title} | {'yes' if c.fixable else 'no'} | {c.reboot} |" for c in controls]
    return "\n".join(rows) + "\n"


def role_readme(role: str, registry: Registry) -> str:
    controls = [c for c in registry.catalog if c.role == role]
    ids = ", ".join(f"`{c.id}`" for c in controls)
    return (f"# gpuhost.stack.{role}\n\n"
            f"Fixes {ids} where the audit found drift: one task file and one tag per\n"
            f"control (`--tags {controls[0].id}` runs that control alone). Used alone in a playbook\n"
            f"(`roles: [gpuhost.stack.{role}]`), it first reads and judges the host (gpuhost.stack.common); after\n"
            "its fixes it says `gpuhost_reboot_required`, and with `gpuhost_reboot_ok: true` its handler\n"
            "reboots a host whose fix waits for a boot. In check mode each fix reports what it would change.\n\n"
            + controls_table(controls) + "\n## Variables\n\n"
            "Declared in `meta/argument_specs.yml` (validated when the role is used on its own), made\n"
            "with the rest of the role's glue by `make generate` from the controls' declarations.\n\n"
            + variables_table(registry.role_params(role)))


def _between(text: str, begin: str, end: str, body: str, where: str) -> str:
    if begin not in text or end not in text:
        raise ValueError(f"{where}: no {begin} ... {end} markers to write between")
    head, rest = text.split(begin, 1)
    return head + begin + "\n" + body + rest[rest.index(end):]


def markdown(registry: Registry) -> str:
    """The controls reference, docs/controls.md."""
    out = ["# gpuhost controls", "",
           "Made by `make generate` from the controls' modules (`plugins/module_utils/controls/<id>.py`).", ""]
    for c in registry.catalog:
        out += [f"## `{c.id}`", "", c.title + ".", "", f"- Why: {c.rationale}.",
                f"- Passes when: {c.passes}.", f"- Fix: {c.repair}.",
                f"- Role: `{c.role}`; fix: {'yes' if c.fixable else 'none (a person acts)'}; reboot: {c.reboot}.",
                f"- Module: `plugins/module_utils/controls/{module_name(c.id)}.py`."]
        if c.params:
            out.append("- Variables: " + ", ".join(f"`{p.name}` ({p.type}, default `{json.dumps(p.default)}`)"
                                                   for p in c.params) + ".")
        if c.references:
            out.append("- References: " + "; ".join(c.references) + ".")
        out.append("")
    return "\n".join(out)


def readme_controls(registry: Registry) -> str:
    rows = ["| ID | passes when | fix |", "|---|---|---|"]
    rows += [f"| `{c.id}` | {c.passes} | {c.repair} |" for c in registry.catalog]
    return "\n".join(rows) + "\n"


def artefacts(root: Path, registry: Registry | None = None) -> dict[str, str]:
    """Every made file, path relative to the collection's root -> the text it must hold."""
    registry = registry or DEFAULT_REGISTRY
    out = {"plugins/module_utils/watchlist.py": watchlist(registry),
           "roles/common/meta/argument_specs.yml": common_argument_specs(registry),
           "roles/common/defaults/main.yml": defaults(registry),
           "roles/common/tasks/fix_all.yml": fix_all(registry),
           "docs/controls.md": markdown(registry)}
    for role in registry.roles:
        if not any(c.role == role for c in registry.catalog):
            continue
        out[f"roles/{role}/meta/argument_specs.yml"] = role_argument_specs(role, registry)
        out[f"roles/{role}/meta/main.yml"] = role_meta(role, registry)
        out[f"roles/{role}/tasks/main.yml"] = role_main(role, registry)
        out[f"roles/{role}/tasks/controls.yml"] = role_controls(role, registry)
        out[f"roles/{role}/README.md"] = role_readme(role, registry)
        for c in registry.catalog:
            if c.role == role:
                out[f"roles/{role}/tasks/{module_name(c.id)}.yml"] = control_tasks(c.id, registry)
    tables = [("README.md", README_BEGIN, README_END, readme_controls(registry)),
              ("roles/common/README.md", VARIABLES_BEGIN, VARIABLES_END, variables_table(registry.params))]
    if (root / PROJECT_README).is_file() and (root / "../../../pyproject.toml").is_file():
        # a checkout: the project's README, which holds the collection at ansible_collections/gpuhost/stack
        tables.append((PROJECT_README, README_BEGIN, README_END, readme_controls(registry)))
    for rel, begin, end, body in tables:
        path = root / rel
        out[rel] = _between(path.read_text(), begin, end, body, rel)
    return out


def stale(root: Path, registry: Registry | None = None) -> list[str]:
    """The made files whose text is not what the declarations make."""
    out = []
    for rel, text in artefacts(root, registry).items():
        path = root / rel
        if not path.exists() or path.read_text() != text:
            out.append(rel)
    return out


def main(argv: list[str] | None = None) -> int:
    from . import COLLECTION

    ap = argparse.ArgumentParser(prog="python -m gpuhost.generate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; list the stale files, exit 1 if any")
    args = ap.parse_args(argv)
    root = COLLECTION
    if args.check:
        out = stale(root)
        for rel in out:
            print(f"stale: {rel}")
        return 1 if out else 0
    for rel, text in artefacts(root).items():
        path = root / rel
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
