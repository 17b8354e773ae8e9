"""The one line a failed fix step leaves in the report: command, exit status, its own words."""
from ansible_collections.gpuhost.stack.plugins.module_utils.failure import describe


def test_a_failed_command_names_itself_its_status_and_its_last_stderr_line():
    res = {"cmd": "set -e\nsetpci -s 0000:01:00.0 CAP_EXP+8.w=5000:7000", "rc": 1, "msg": "non-zero return code",
           "stderr": "setpci: Warning: No devices selected for \"0000:01:00.0\".\n", "stdout": ""}
    assert describe(res) == ("`set -e setpci -s 0000:01:00.0 CAP_EXP+8.w=5000:7000` exited 1: "
                             "setpci: Warning: No devices selected for \"0000:01:00.0\".")


def test_a_command_that_says_nothing_is_said_to_say_nothing():
    assert describe({"cmd": ["systemctl", "daemon-reload"], "rc": 1, "stderr": "", "stdout": ""}) == \
        "`systemctl daemon-reload` exited 1: no output"


def test_a_timeout_is_said_in_seconds():
    res = {"msg": "The shell action failed to execute in the expected time frame (120) and was terminated"}
    assert describe(res) == "timed out after 120 s"


def test_a_module_failure_keeps_its_message_and_adds_stderr_it_does_not_contain():
    assert describe({"msg": "MODULE FAILURE", "module_stderr": "Traceback ...\nOSError: [Errno 30] Read-only file system"}) == \
        "MODULE FAILURE: OSError: [Errno 30] Read-only file system"
    assert describe({"msg": "refresh failed: E: boom", "stderr": "E: boom"}) == "refresh failed: E: boom"
    assert describe({}) == "failed"


def test_a_loop_says_what_its_failing_item_said():
    res = {"msg": "One or more items failed", "results": [
        {"failed": False, "item": {"path": "/etc/a"}},
        {"failed": True, "item": {"path": "/etc/sysctl.conf"}, "ansible_loop_var": "item",
         "msg": "/var/backups/gpuhost is a symbolic link: gpuhost does not write through it"}]}
    assert describe(res) == "/etc/sysctl.conf: /var/backups/gpuhost is a symbolic link: gpuhost does not write through it"


def test_a_host_with_python_36_is_named_as_such_not_as_a_deserialization_failure():
    """Issue 19. The result as ansible-core 2.17 gives it for a Python 3.6 host (its shape and
    words from ansible/ansible#84761 and lisenet/homelab-ansible#84)."""
    res = {"changed": False, "msg": "Module result deserialization failed: No start of json char found See "
                                    "stdout/stderr for the returned output.",
           "module_stderr": "Shared connection to 10.11.1.20 closed.",
           "module_stdout": "Traceback (most recent call last):\n  File \"<stdin>\", line 12, in <module>\n"
                            "SyntaxError: future feature annotations is not defined\n"}
    assert describe(res) == ("the host's Python is older than 3.7 (SyntaxError: future feature annotations is not "
                             "defined): ansible-core 2.17 and gpuhost need Python 3.7 or later as the host's "
                             "ansible_python_interpreter")


def test_a_long_apt_error_keeps_its_cause_at_the_end():
    """Issue 19: apt's errors were cut at 300 characters, before the cause."""
    tail = "E: Unable to locate package proxmox-kernel-6.14"
    res = {"msg": "'/usr/bin/apt-get -y install proxmox-kernel-6.14' failed: " + "W: noise line. " * 120 + tail}
    line = describe(res)
    assert line.endswith(tail) and line.startswith("'/usr/bin/apt-get -y install") and len(line) <= 1000


def test_a_full_boot_is_named():
    """The fault campaign: a kernel install that filled /boot ended in dpkg's last line alone.
    The lines are dpkg's and update-initramfs' own words for ENOSPC."""
    res = {"cmd": ["apt-get", "install", "-y", "proxmox-kernel-6.14"], "rc": 100,
           "stdout": "Unpacking proxmox-kernel-6.14.11-4-pve-signed (6.14.11-4) ...\n",
           "stderr": "dpkg: error processing archive /var/cache/apt/archives/proxmox-kernel-6.14.11-4-pve-signed.deb "
                     "(--unpack):\n cannot copy extracted data for './boot/vmlinuz-6.14.11-4-pve' to "
                     "'/boot/vmlinuz-6.14.11-4-pve.dpkg-new': failed to write (No space left on device)\n"
                     "E: Sub-process /usr/bin/dpkg returned an error code (1)\n"}
    line = describe(res)
    assert line.endswith("(/boot is full: see `df -h /boot`, and remove kernels that no longer boot)"), line
    assert line.startswith("`apt-get install -y proxmox-kernel-6.14` exited 100: E: Sub-process /usr/bin/dpkg")
    elsewhere = {"msg": "cannot write /etc/sysctl.d/90-gpuhost.conf: No space left on device"}
    assert describe(elsewhere).endswith("(a file system is full: No space left on device)")
    assert "full" not in describe({"msg": "cannot write /boot/x: Permission denied"})
