# -*- coding: utf-8 -*-
"""Action plugin gpuhost.stack.bios_settings: write a host's staged BIOS values through its BMC,
from the controller, in one request (module_utils/redfish_write.py).

The BMC is reached from here, never from the host: the host's gpuhost_bmc_* variables (a vault
works) give the address and credentials, which go to the BMC and nowhere else; no result or
message holds the password. Its documentation is plugins/modules/bios_settings.py.
"""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpuhost.stack.plugins.module_utils.failure import BAD_INPUT_MARK
from ansible_collections.gpuhost.stack.plugins.module_utils.redfish import RedfishError, connect
from ansible_collections.gpuhost.stack.plugins.module_utils.redfish_write import WritableBmc, write_bios

BMC_VARS = ("gpuhost_bmc_address", "gpuhost_bmc_username", "gpuhost_bmc_password", "gpuhost_bmc_ca",
            "gpuhost_bmc_validate_certs", "gpuhost_bmc_system", "gpuhost_bmc_timeout")


def staged_values(staged) -> dict:
    """{control: {attribute: value}} from the fixes' staged BiosSet data, checked."""
    if not isinstance(staged, dict):
        raise ValueError("staged must be a mapping of control IDs to their bios fix")
    out = {}
    for control, fix in staged.items():
        attributes = (fix or {}).get("attributes") if isinstance(fix, dict) else None
        if not isinstance(attributes, dict) or not attributes:
            raise ValueError("staged %s holds no attributes" % control)
        out[str(control)] = {str(k): str(v) for k, v in attributes.items()}
    return out


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        try:
            staged = staged_values(self._task.args.get("staged"))
        except ValueError as exc:
            return {**result, "failed": True, "msg": "%s%s" % (BAD_INPUT_MARK, exc)}
        if not staged:
            return {**result, "changed": False, "written": {}, "controls": [], "msg": "nothing staged"}
        values = {name: self._templar.template(task_vars[name]) for name in BMC_VARS if name in task_vars}
        address = str(values.get("gpuhost_bmc_address") or "")
        if not address:
            return {**result, "failed": True, "msg": "%sno gpuhost_bmc_address for this host: no BMC to write to" % BAD_INPUT_MARK}
        try:
            out = write_bios(connect(values, WritableBmc), str(values.get("gpuhost_bmc_system") or "") or None, staged,
                             check=bool(self._task.check_mode))
        except RedfishError as exc:
            return {**result, "failed": True, "msg": "BIOS settings not written: %s" % exc, "bmc": address}
        written = out["written"]
        verb = "would write" if self._task.check_mode else "wrote"
        result.update(
            changed=bool(written), bmc=address, written=written, controls=sorted(out["controls"]),
            skipped=["%s (%s)" % s for s in out["skipped"]], apply_time=out["apply_time"], job=out["job"],
            settings_object=out["settings_object"],
            msg=("%s %s to %s for the next reset" % (verb, ", ".join("%s=%s" % kv for kv in sorted(written.items())),
                                                     out["settings_object"])) if written
            else "every staged value is already set or pending: nothing written")
        if written:
            result["diff"] = {"before": "", "after": "".join("%s=%s\n" % kv for kv in sorted(written.items())),
                              "after_header": "%s %s (pending)" % (address, out["settings_object"])}
        return result
