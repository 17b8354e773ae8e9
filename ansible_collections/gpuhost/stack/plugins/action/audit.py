# -*- coding: utf-8 -*-
"""Action plugin gpuhost.stack.audit: read a host and judge every control in one task.

It runs the facts module on the host and the judgement (module_utils/controls/) on the
controller inside the same task, so an audit costs one worker fork and one result per host,
like a `setup` task. Nothing is written to the host: the facts module only reads. Its
documentation (options, return values) is plugins/modules/audit.py, where ansible-doc reads it.
"""
from __future__ import annotations

import datetime
import json
import time

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.gpuhost.stack.plugins.module_utils.controls import evaluate, plain, reboot_record
from ansible_collections.gpuhost.stack.plugins.module_utils.pathproof import MEMORY_THRESHOLD, judge as judge_paths
from ansible_collections.gpuhost.stack.plugins.module_utils.controls.bios import WANTED_NAMES
from ansible_collections.gpuhost.stack.plugins.module_utils.failure import BAD_INPUT_MARK
from ansible_collections.gpuhost.stack.plugins.module_utils.redfish import RedfishError, connect, read_bios
from ansible_collections.gpuhost.stack.plugins.module_utils.variables import (
    InventoryError, cannot_render, check_vars, render_waivers, settings_from)


def gpu_devices(facts: dict) -> list:
    """One record per NVIDIA GPU: what nvidia-smi says (name, compute capability,
    persistence) joined by BDF with what its PCIe config space says (link, MaxReadReq)."""
    pci = {d.get("bdf"): d for d in facts.get("pci") or []}
    smi = {g.get("bdf"): g for g in (facts.get("nvidia") or {}).get("gpus") or []}
    # every NVIDIA display controller (vendor 0x10de, class 0x03xxxx), even one nvidia-smi does not show
    bdfs = sorted(set(smi) | {b for b, d in pci.items() if d.get("vendor") == 0x10DE and (d.get("class") or 0) >> 16 == 3})
    out = []
    for bdf in bdfs:
        d, g = pci.get(bdf) or {}, smi.get(bdf) or {}
        now, cap = d.get("link_sta") or {}, d.get("link_cap") or {}
        out.append({"bdf": bdf, "name": g.get("name"), "compute_capability": g.get("compute_cap"),
                    # PCIe generation and lane count, as running and as the link can (LnkSta, LnkCap)
                    "link": {"gen": now.get("gen"), "width": now.get("width"),
                             "max_gen": cap.get("gen"), "max_width": cap.get("width")} if now or cap else None,
                    "max_read_request_bytes": d.get("mrrs"), "persistence": g.get("persistence"),
                    "driver": d.get("driver"), "numa_node": d.get("numa_node")})
    return out


def report_facts(facts: dict) -> dict:
    """The few facts the report shows beside the findings."""
    return {"gpu_devices": gpu_devices(facts), "kernel": (facts.get("boot") or {}).get("running_kernel"),
            "cpu": (facts.get("cpu") or {}).get("model_name"),
            "gpus": len((facts.get("nvidia") or {}).get("gpus") or []),
            "os": (facts.get("os") or {}).get("pretty_name"),
            "container": (facts.get("container") or {}).get("kind"),
            "errors": facts.get("errors") or {}}


def read_bmc(values: dict) -> dict:
    """The host's BIOS as its BMC tells it (module_utils/redfish.py), or the one-line error
    that names the BMC; the credentials go to the BMC and nowhere else."""
    address = str(values["gpuhost_bmc_address"])
    try:
        return read_bios(connect(values), str(values.get("gpuhost_bmc_system") or "") or None, WANTED_NAMES)
    except RedfishError as exc:
        text = str(exc)
        return {"address": address, "error": text[len(address) + 2:] if text.startswith(address + ": ") else text}


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        report = args.get("report")
        plans, as_json = True, False
        prove = args.get("prove")
        values: dict = {}
        if args.get("settings") is not None:
            settings = plain(args["settings"])
        else:
            # the host's own variables, checked here: each host in its own worker, in parallel,
            # where a run_once check would template every host's variables in one
            try:
                values = self.host_variables(task_vars)
            except InventoryError as exc:
                return {**result, "failed": True, "msg": f"{BAD_INPUT_MARK}{exc}"}
            settings = settings_from(values, task_vars.get("ansible_run_tags"))
            if report is None:
                # derived here, not templated in the task's arguments: each worker is a fresh
                # fork that would compile that template again, some 8 ms of controller CPU a host.
                # gpuhost_report_stats false: the caller (gpuhost's CLI) reads the task's own
                # result, so the findings do not travel through the stats a second time
                report = (not boolean(values.get("gpuhost_apply", True), strict=False)
                          and boolean(values.get("gpuhost_report_stats", True), strict=False))
            # gpuhost_fix_plans false (`gpuhost audit`: no fix follows, nor a plan to print):
            # each finding comes back without its fix plan: a third of the findings' bytes less
            # for the worker to send and for the callbacks and ansible-runner's events to copy
            plans = boolean(values.get("gpuhost_fix_plans", True), strict=False)
            # gpuhost_report_json (the CLI's runs of audit.yml, where nothing in the play reads
            # the findings as facts): findings and summary come back as one JSON string for the
            # CLI to decode. Ansible's main process copies a result and converts it to native
            # types node by node for the callbacks: some 5 ms of its CPU a host as facts, next
            # to nothing as one string
            as_json = boolean(values.get("gpuhost_report_json", False), strict=False)
            prove = prove or values.get("gpuhost_prove")
        probed = self._execute_module(module_name="gpuhost.stack.facts", task_vars=task_vars,
                                      module_args={"cuda_paths": list(settings.get("guest_cuda_paths") or [])})
        if probed.get("failed") or probed.get("unreachable"):
            return {**result, **probed}
        facts = (probed.get("ansible_facts") or {}).get("gpuhost") or {}
        # the host's BMC, read from here (the controller), never from the host; GETs only
        facts["bmc"] = read_bmc(values) if values.get("gpuhost_bmc_address") else None
        findings = evaluate(facts, settings)        # which makes its own plain copy to judge
        reboot = any(f.get("status") == "pending_reboot" for f in findings.values())
        # the findings and a summary of the host come back, not the facts themselves (some
        # 100 kB a host): serialising them through the worker, the callbacks and the event
        # stream was most of an audit's controller CPU. Ask for them with facts: true.
        summary = report_facts(facts)
        if not plans:
            findings = {cid: {k: v for k, v in f.items() if k != "fix"} for cid, f in findings.items()}
        proved = None
        if prove:
            # measured after the host was read, never during: the probe's reads stay what an
            # audit reads, and a failed measurement costs the proof only, not the findings
            proved = self.prove(prove, facts, findings, task_vars)
        if as_json:
            result.update(changed=False, gpuhost_report=json.dumps(
                {"findings": findings, "summary": summary, "reboot_required": reboot,
                 **({"proof": proved} if proved is not None else {})}, sort_keys=True))
        else:
            # what a reboot now would be for, written on the host before it
            record = reboot_record(findings, (facts.get("boot") or {}).get("boot_id"),
                                   datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                   int(time.time()))
            result.update(changed=False,
                          ansible_facts={"gpuhost_findings": findings, "gpuhost_reboot_required": reboot,
                                         "gpuhost_reboot_record": record, "gpuhost_summary": summary,
                                         **({"gpuhost_proof": proved} if proved is not None else {}),
                                         **({"gpuhost": facts} if args.get("facts") else {})})
        if report:
            host = task_vars.get("inventory_hostname")
            result["ansible_stats"] = {"data": {"gpuhost": {host: {"changed": [], "failed": {}, "findings": findings,
                                                                   "facts": summary}}},
                                       "per_host": False, "aggregate": True}
        return result

    MEASURE_ARGS = ("gpus", "repeats", "bytes", "time_limit", "force", "busy_percent")

    def prove(self, how, facts: dict, findings: dict, task_vars) -> dict:
        """Measure the host's paths (M(gpuhost.stack.measure)) and hold each against its limit."""
        how = dict(how) if isinstance(how, dict) else {}
        # gpuhost prove measures hosts first, then their containers one at a time
        # (App.measure): the pass that is not this host's leaves it alone
        contained = bool((facts.get("container") or {}).get("in_container"))
        if how.get("where") == ("containers" if not contained else "hosts"):
            return {"method": "measured", "paths": [], "gpus": [], "deferred": True,
                    "conclusion": "measured in the %s pass" % ("containers'" if contained else "hosts'")}
        measured = self._execute_module(module_name="gpuhost.stack.measure", task_vars=task_vars,
                                        module_args={k: how[k] for k in self.MEASURE_ARGS if k in how})
        if measured.get("failed") or measured.get("unreachable"):
            return {"method": "measured", "paths": [], "gpus": [],
                    "error": str(measured.get("msg") or "the measurement failed").splitlines()[0],
                    "conclusion": "not measured"}
        try:
            return judge_paths(measured.get("measurement") or {}, facts, findings,
                               threshold=float(how.get("threshold", 0.85)),
                               memory_threshold=float(how.get("memory_threshold", MEMORY_THRESHOLD)))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            # the proof fails alone: the host's findings still come back
            return {"method": "measured", "paths": [], "gpus": [], "conclusion": "not judged",
                    "error": "judging the measurement failed: %s: %s" % (type(exc).__name__, exc)}

    def host_variables(self, task_vars: dict) -> dict:
        """Every gpuhost_* variable of this host, rendered and checked (a misspelt one is bad
        input too, not silently ignored)."""
        host = str(task_vars.get("inventory_hostname"))
        values = {}
        for name in sorted(str(k) for k in task_vars if str(k).startswith("gpuhost_")):
            try:
                raw = task_vars[name]
                if raw is None or isinstance(raw, (bool, int, float)) or (isinstance(raw, str) and "{" not in raw):
                    # nothing to render (most are the roles' defaults): templating each of some 60
                    # variables cost every host's worker some 6 ms of CPU (a vault's value is
                    # no str, and is rendered below)
                    values[name] = plain(str(raw) if isinstance(raw, str) else raw)
                    continue
                # a waiver's reason is the operator's prose, shown as written (never rendered)
                values[name] = plain(render_waivers(raw, self._templar.template) if name == "gpuhost_waivers"
                                     else self._templar.template(raw))
            except Exception as exc:        # AnsibleUndefinedVariable and template errors alike
                raise cannot_render(host, name, exc) from None
        check_vars(host, values)
        return values
