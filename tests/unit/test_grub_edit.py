"""GRUB command-line edits as tokens in place, checked as grub-mkconfig reads the files."""
from __future__ import annotations

import pytest

import scenarios
import gpuhost  # noqa: F401  (puts the collection gpuhost.stack on the import path)
from ansible_collections.gpuhost.stack.plugins.modules import cmdline


def edit(text, set_=None, remove=(), placed=None):
    placed = set() if placed is None else placed
    return "".join(cmdline.edit_grub_line(line, set_ or {}, set(remove), placed) for line in text.splitlines(True))


@pytest.mark.parametrize("before, set_, remove, after", [
    # single quotes, a trailing comment, CRLF: all kept
    ("GRUB_CMDLINE_LINUX_DEFAULT='quiet amd_pstate=passive splash'  # tuned\r\n", {"amd_pstate": "active"}, (),
     "GRUB_CMDLINE_LINUX_DEFAULT='quiet amd_pstate=active splash'  # tuned\r\n"),
    # removal takes one blank with it; $ references and escaped quotes untouched
    ('GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX intel_pstate=disable dyndbg=\\"module x +p\\""\n', {}, ("intel_pstate",),
     'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX dyndbg=\\"module x +p\\""\n'),
    # the first of several assignments of a parameter is edited, later duplicates go
    ('GRUB_CMDLINE_LINUX_DEFAULT="iommu=soft quiet iommu=off"', {"iommu": "pt"}, (),
     'GRUB_CMDLINE_LINUX_DEFAULT="iommu=pt quiet"'),
    # no final newline, unquoted value
    ("GRUB_CMDLINE_LINUX=intel_pstate=disable", {}, ("intel_pstate",), "GRUB_CMDLINE_LINUX="),
    # a name that is a prefix of another is not touched
    ('GRUB_CMDLINE_LINUX_DEFAULT="iommu.passthrough=0 quiet"', {}, ("iommu",),
     'GRUB_CMDLINE_LINUX_DEFAULT="iommu.passthrough=0 quiet"'),
    # other variables and comment lines are never edited
    ("# iommu=off here is a comment\nGRUB_TIMEOUT=5\n", {}, ("iommu",), "# iommu=off here is a comment\nGRUB_TIMEOUT=5\n"),
])
def test_parameters_are_edited_where_they_stand(before, set_, remove, after):
    assert edit(before, set_, remove) == after


def test_the_result_is_checked_as_grub_reads_it():
    main = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet amd_pstate=passive"\nGRUB_CMDLINE_LINUX=""\n'
    dropin = 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT amd_pstate=guided"\n'
    placed = set()
    new_main = edit(main, {"amd_pstate": "active"}, (), placed)
    new_drop = edit(dropin, {"amd_pstate": "active"}, (), placed)
    assert placed == {"amd_pstate"} and "amd_pstate" not in new_drop, "a later assignment would win: it goes"
    before = [("/etc/default/grub", main), ("/etc/default/grub.d/50-local.cfg", dropin)]
    after = [("/etc/default/grub", new_main), ("/etc/default/grub.d/50-local.cfg", new_drop)]
    assert cmdline.check_grub_result(before, after, {"amd_pstate": "active"}, set()) is None
    assert cmdline.grub_cmdline_of(after) == ["quiet", "amd_pstate=active"]
    # an edit that would lose another parameter is refused
    broken = [("/etc/default/grub", new_main.replace("quiet ", "")), after[1]]
    assert "other parameters" in cmdline.check_grub_result(before, broken, {"amd_pstate": "active"}, set())


def test_a_setting_that_cannot_be_read_safely_is_refused():
    texts = [("/etc/default/grub", 'GRUB_CMDLINE_LINUX_DEFAULT="$(cat /etc/cmdline.local)"\n')]
    with pytest.raises(scenarios.probe.ShellValueError, match="/etc/default/grub line 1: command substitution"):
        cmdline.grub_cmdline_of(texts)


@pytest.mark.parametrize("before, set_, remove, after", [
    # a quoted value with blanks survives (the kernel reads the quotes); a parameter is set where it stands
    ('root=ZFS=rpool/ROOT/pve-1 boot=zfs dyndbg="module x +p" amd_pstate=passive\n', {"amd_pstate": "active"}, (),
     'root=ZFS=rpool/ROOT/pve-1 boot=zfs dyndbg="module x +p" amd_pstate=active\n'),
    # new ones appended; a file without a final newline keeps having none
    ("root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet", {"iommu": "pt"}, (), "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet iommu=pt"),
    # CRLF kept, removal in the middle takes one blank
    ("quiet intel_pstate=disable splash\r\n", {}, ("intel_pstate",), "quiet splash\r\n"),
    # ';' is fine here: systemd-boot copies the line verbatim
    ("quiet\n", {"pci": "disable_acs_redir=pci:1000:c030;pci:10b5:8747"}, (),
     "quiet pci=disable_acs_redir=pci:1000:c030;pci:10b5:8747\n"),
])
def test_kernel_cmdline_is_edited_in_place(before, set_, remove, after):
    assert cmdline.edit_kernel_cmdline(before, set_, set(remove)) == after
