"""The one line a failed fix step leaves in the report: command, exit status, its own words."""
from gpuhost.failure import describe


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
