"""The measurement (module_utils/measure.py over cudadrv.py) and the lab's libcuda.so.1 it
runs on in the lab (issue 38), at unit speed: the library answers every driver call the
measurement makes the way cuda.h's documentation says the driver does, bad calls included,
and the measurement places its threads, refuses busy GPUs, stops at its time bound, turns a
failing GPU into an error for that GPU alone and gives back every buffer, on every way out.

Each test loads its own copy of the library (a separate dlopen), with a model file and a
sysfs of two NUMA nodes made for it: node 0 is CPU 0, node 1 CPU 1 (CI has two cores)."""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.gpuhost.stack.plugins.module_utils import cudadrv, measure
from gpuhost.lab.provision import lab_libcuda

ROOT = Path(__file__).resolve().parents[2]
BUS = ("0000:01:00.0", "0000:81:00.0")
GPU_LINE = ("gpu {i} {bus} node={node} share={share} mem_mib=81559 h2d_local=55 h2d_remote=50 d2h_local=56 "
            "d2h_remote=51 mem=1600 launch_local=3 launch_remote=3.5 sync_local=5 sync_remote=5")


def model(peer_ok=1, share=-1, extra="", drops=0):
    lines = ["driver 12090", "seed 7", "noise 0.01", "node 0 0", "node 1 1"]
    for i, bus in enumerate(BUS):
        lines += [GPU_LINE.format(i=i, bus=bus, node=i, share=share), f"name {i} NVIDIA H100 PCIe"]
    lines += [f"peer 0 1 {peer_ok} 55.5 0.4 42.5 14 {drops}", f"peer 1 0 {peer_ok} 55.5 0.4 42.5 14 {drops}"]
    if share >= 0:
        lines.append(f"share {share} 55")
    return "\n".join(lines) + "\n" + extra


@pytest.fixture
def lab_gpus(tmp_path, monkeypatch):
    """make(model text) -> a Driver over a fresh copy of the lab's library; the sysfs path."""
    sysfs = tmp_path / "sys"
    for n, cpu in ((0, "0"), (1, "1")):
        d = sysfs / f"devices/system/node/node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpu + "\n")
        (d / "distance").write_text("10 32\n" if n == 0 else "32 10\n")
    for n, bus in enumerate(BUS):
        d = sysfs / "bus/pci/devices" / bus
        d.mkdir(parents=True)
        (d / "numa_node").write_text(f"{n}\n")
    copies = []

    def make(text: str):
        path = tmp_path / f"model{len(copies)}"
        path.write_text(text)
        monkeypatch.setenv("GPUHOST_LAB_CUDA_MODEL", str(path))
        lib = tmp_path / f"lib{len(copies)}" / "libcuda.so.1"
        lib.parent.mkdir()
        shutil.copy(lab_libcuda(), lib)
        copies.append(lib)
        return cudadrv.Driver(str(lib))
    return make, str(sysfs)


def idle(argv):
    """nvidia-smi with nothing running and nothing busy."""
    if "--query-compute-apps=gpu_bus_id,pid,process_name" in argv:
        return 0, "", ""
    return 0, "".join(f"0000{b.upper()}, 0, 3\n" for b in BUS), ""


def code(drv, name, *args):
    return drv.status(name, *args)


# ---- the library against cuda.h's documentation ---------------------------------------------------
def test_every_call_before_cuinit_is_not_initialized_and_cuinit_takes_no_flags(lab_gpus):
    make, _ = lab_gpus
    drv = make(model())
    n = ctypes.c_int()
    # "If cuInit() has not been called, any function from the driver API will return
    # CUDA_ERROR_NOT_INITIALIZED" (3); cuDriverGetVersion is not among them
    assert code(drv, "cuDeviceGetCount", ctypes.byref(n)) == 3
    assert code(drv, "cuDriverGetVersion", ctypes.byref(n)) == 0 and n.value == 12090
    assert code(drv, "cuInit", 1) == 1                      # flags must be 0: INVALID_VALUE
    assert code(drv, "cuInit", 0) == 0
    assert code(drv, "cuDeviceGetCount", ctypes.byref(n)) == 0 and n.value == 2
    assert drv.modelled, "the lab's library says what it is"


def test_no_gpu_in_the_model_is_no_device(lab_gpus):
    make, _ = lab_gpus
    drv = make("driver 12080\n")        # the driver is not loaded: the model lists no GPU
    assert code(drv, "cuInit", 0) == 100                    # CUDA_ERROR_NO_DEVICE
    out = measure.measure(drv, run=idle)
    assert out["na"].startswith("no NVIDIA GPU the driver can use") and out["paths"] == []


def test_devices_names_and_bus_ids_as_the_driver_gives_them(lab_gpus):
    make, _ = lab_gpus
    drv = make(model())
    drv.call("cuInit", 0)
    dev = ctypes.c_int()
    assert code(drv, "cuDeviceGet", ctypes.byref(dev), 2) == 101       # out of range: INVALID_DEVICE
    assert drv.text("cuDeviceGetPCIBusId", 1, 13) == "0000:81:00.0"     # 13 bytes with the NUL
    buf = ctypes.create_string_buffer(12)
    assert code(drv, "cuDeviceGetPCIBusId", buf, 12, 0) == 1            # too short a buffer
    assert drv.text("cuDeviceGetName", 0) == "NVIDIA H100 PCIe"
    name = ctypes.c_char_p()
    assert code(drv, "cuGetErrorName", 704, ctypes.byref(name)) == 0
    assert name.value == b"CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"
    # an unknown code: INVALID_VALUE and a NULL string
    assert code(drv, "cuGetErrorName", 12345, ctypes.byref(name)) == 1 and name.value is None


def test_contexts_streams_events_and_their_order_errors(lab_gpus):
    make, _ = lab_gpus
    drv = make(model())
    drv.call("cuInit", 0)
    s = ctypes.c_void_p()
    # no current context: INVALID_CONTEXT
    assert code(drv, "cuStreamCreate", ctypes.byref(s), 0) == 201
    ctx = drv.out("cuDevicePrimaryCtxRetain", ctypes.c_void_p, 0)
    drv.call("cuCtxSetCurrent", ctx)
    stream = drv.out("cuStreamCreate", ctypes.c_void_p, 1)
    start = drv.out("cuEventCreate", ctypes.c_void_p, 0)
    end = drv.out("cuEventCreate", ctypes.c_void_p, 0)
    ms = ctypes.c_float()
    # neither event recorded: INVALID_HANDLE
    assert code(drv, "cuEventElapsedTime", ctypes.byref(ms), start, end) == 400
    dst = drv.out("cuMemAlloc_v2", ctypes.c_uint64, 1 << 26)
    was = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})        # on GPU 0's node: the buffer's pages are that node's
    try:
        src = drv.out("cuMemHostAlloc", ctypes.c_void_p, 1 << 26, 1)
        drv.call("cuEventRecord", start, stream)
        drv.call("cuMemcpyHtoDAsync_v2", dst, src, 1 << 26, stream)
        drv.call("cuEventRecord", end, stream)
    finally:
        os.sched_setaffinity(0, was)
    # recorded, not yet complete: NOT_READY
    assert code(drv, "cuEventElapsedTime", ctypes.byref(ms), start, end) == 600
    drv.call("cuEventSynchronize", end)
    drv.call("cuEventElapsedTime", ctypes.byref(ms), start, end)
    # 64 MiB at the model's 55 GB/s, 1 % noise
    assert 1.19 < ms.value < 1.25, ms.value
    # a copy that runs past the end of the allocation, or from memory that is not pinned
    assert code(drv, "cuMemcpyHtoDAsync_v2", dst, src, (1 << 26) + 1, stream) == 1
    assert code(drv, "cuMemcpyHtoDAsync_v2", dst, ctypes.c_void_p(0x1000), 4, stream) == 1
    # freeing what was not allocated so
    assert code(drv, "cuMemFreeHost", ctypes.c_void_p(0x1000)) == 1
    assert code(drv, "cuMemFree_v2", dst + 16) == 1
    drv.call("cuMemFreeHost", src)
    drv.call("cuMemFree_v2", dst)
    assert code(drv, "cuStreamDestroy_v2", ctypes.c_void_p(0x1234)) == 400
    drv.call("cuStreamDestroy_v2", stream)
    assert code(drv, "cuStreamSynchronize", stream) == 400             # gone
    drv.call("cuDevicePrimaryCtxRelease_v2", 0)
    assert code(drv, "cuCtxSetCurrent", ctx) == 201                     # released: no longer a context


def test_peer_access_is_what_the_driver_allows_once(lab_gpus):
    make, _ = lab_gpus
    for ok in (1, 0):
        drv = make(model(peer_ok=ok))
        drv.call("cuInit", 0)
        assert drv.out("cuDeviceCanAccessPeer", ctypes.c_int, 0, 1) == ok
        a = drv.out("cuDevicePrimaryCtxRetain", ctypes.c_void_p, 0)
        b = drv.out("cuDevicePrimaryCtxRetain", ctypes.c_void_p, 1)
        drv.call("cuCtxSetCurrent", a)
        assert code(drv, "cuCtxEnablePeerAccess", b, 1) == 1            # flags must be 0
        assert code(drv, "cuCtxEnablePeerAccess", a, 0) == 201          # itself
        if ok:
            assert code(drv, "cuCtxEnablePeerAccess", b, 0) == 0
            assert code(drv, "cuCtxEnablePeerAccess", b, 0) == 704      # PEER_ACCESS_ALREADY_ENABLED
            assert code(drv, "cuCtxDisablePeerAccess", b) == 0
        else:
            assert code(drv, "cuCtxEnablePeerAccess", b, 0) == 217      # PEER_ACCESS_UNSUPPORTED
        assert code(drv, "cuCtxDisablePeerAccess", b) == 705            # PEER_ACCESS_NOT_ENABLED


def test_modules_and_launches(lab_gpus):
    make, _ = lab_gpus
    drv = make(model())
    drv.call("cuInit", 0)
    fn = ctypes.c_void_p()
    assert code(drv, "cuLaunchKernel", fn, 1, 1, 1, 1, 1, 1, 0, None, None, None) == 201   # no context
    ctx = drv.out("cuDevicePrimaryCtxRetain", ctypes.c_void_p, 0)
    drv.call("cuCtxSetCurrent", ctx)
    mod = ctypes.c_void_p()
    assert code(drv, "cuModuleLoadData", ctypes.byref(mod), b"\x7fELF not a module\x00") == 200   # INVALID_IMAGE
    mod = drv.out("cuModuleLoadData", ctypes.c_void_p, cudadrv.EMPTY_PTX[0])
    assert code(drv, "cuModuleGetFunction", ctypes.byref(fn), mod, b"no_such_kernel") == 500    # NOT_FOUND
    drv.call("cuModuleGetFunction", ctypes.byref(fn), mod, cudadrv.EMPTY_KERNEL)
    stream = drv.out("cuStreamCreate", ctypes.c_void_p, 1)
    assert code(drv, "cuLaunchKernel", fn, 1, 1, 1, 2048, 1, 1, 0, stream, None, None) == 1    # 2048 threads a block
    assert code(drv, "cuLaunchKernel", fn, 1, 1, 1, 1, 1, 1, 0, stream, None, None) == 0
    drv.call("cuStreamSynchronize", stream)
    drv.call("cuModuleUnload", mod)
    assert code(drv, "cuLaunchKernel", fn, 1, 1, 1, 1, 1, 1, 0, stream, None, None) == 400     # its module is gone


# ---- the measurement ------------------------------------------------------------------------------
def rows(out, path, **where):
    return [p for p in out["paths"] if p["path"] == path and all(p.get(k) == v for k, v in where.items())]


def median(row):
    return sorted(row["samples"])[len(row["samples"]) // 2]


def test_every_path_is_measured_from_the_right_cpus_and_everything_is_given_back(lab_gpus):
    make, sysfs = lab_gpus
    affinity = os.sched_getaffinity(0)
    out = measure.measure(make(model()), sysfs=sysfs, run=idle, nbytes=64 << 20)
    assert os.sched_getaffinity(0) == affinity, "the thread's CPUs are put back"
    assert out["method"] == "modelled" and out["driver_version"] == 12090 and out["devices"] == 2
    assert out["cpus"] == {"0": [0], "1": [1]}
    for gpu, (local, remote) in enumerate(((0, 1), (1, 0))):
        near = rows(out, "host_to_gpu", gpu=gpu, numa="local")[0]
        far = rows(out, "host_to_gpu", gpu=gpu, numa="remote")[0]
        assert (near["cpu_node"], far["cpu_node"]) == (local, remote)
        # the model's 55 GB/s from the GPU's node and 50 from the other: the thread was placed
        assert 54 < median(near) < 56 and 49 < median(far) < 51
        assert len(near["samples"]) == 5
        assert 55 < median(rows(out, "gpu_to_host", gpu=gpu, numa="local")[0]) < 57
        assert 1580 < median(rows(out, "gpu_memory", gpu=gpu)[0]) < 1620      # read + written bytes
        launch, sync = rows(out, "launch", gpu=gpu)[0], rows(out, "launch_sync", gpu=gpu)[0]
        assert median(launch) >= 3 and median(sync) >= 8                     # spun for real: at least the model
    pair = rows(out, "gpu_to_gpu", gpu=0, peer=1)[0]
    assert pair["via"] == "peer" and 54 < median(pair) < 57 and pair["delivered"] is True
    assert 0.39 < median(rows(out, "gpu_to_gpu_latency", gpu=0)[0]) < 0.42
    both = rows(out, "host_to_all_gpus")[0]
    assert both["members"] == [0, 1] and 108 < median(both) < 112
    # at most two 64 MiB buffers a GPU at a time; nothing left at the end
    assert out["pinned_peak_bytes"] <= 2 * 2 * (64 << 20) and out["pinned_left_bytes"] == 0
    assert "release_errors" not in out and out["out_of_time"] is False


def test_gpus_below_one_switch_split_its_upstream_link_when_they_copy_at_once(lab_gpus):
    make, sysfs = lab_gpus
    out = measure.measure(make(model(share=0)), sysfs=sysfs, run=idle, nbytes=16 << 20)
    # alone each copies at 55; together they share the switch's 55
    assert 54 < median(rows(out, "host_to_gpu", gpu=1, numa="local")[0]) < 56
    assert 54 < median(rows(out, "host_to_all_gpus")[0]) < 56


def test_no_peer_access_is_a_copy_through_the_host(lab_gpus):
    make, sysfs = lab_gpus
    out = measure.measure(make(model(peer_ok=0)), sysfs=sysfs, run=idle, nbytes=16 << 20)
    pair = rows(out, "gpu_to_gpu", gpu=0, peer=1)[0]
    assert pair["via"] == "host" and 40 < median(pair) < 45 and pair["delivered"] is True
    assert 13 < median(rows(out, "gpu_to_gpu_latency", gpu=0)[0]) < 15


def test_peer_writes_the_platform_drops_are_caught_by_what_arrives(lab_gpus):
    """A translating IOMMU: the driver grants peer access, the copies report success on time,
    and the bytes never land (the lab's library leaves the destination as it was)."""
    make, sysfs = lab_gpus
    out = measure.measure(make(model(drops=1)), sysfs=sysfs, run=idle, nbytes=16 << 20)
    pair = rows(out, "gpu_to_gpu", gpu=0, peer=1)[0]
    assert pair["via"] == "peer" and pair["delivered"] is False and 54 < median(pair) < 57


def test_a_gpu_in_use_is_refused_unless_forced(lab_gpus):
    make, sysfs = lab_gpus

    def busy(argv):
        if "--query-compute-apps=gpu_bus_id,pid,process_name" in argv:
            return 0, "00000000:81:00.0, 4242, python3\n", ""
        return 0, "00000000:01:00.0, 0, 3\n00000000:81:00.0, 37, 30000\n", ""
    out = measure.measure(make(model()), sysfs=sysfs, run=busy, nbytes=16 << 20)
    assert [g.get("refused") for g in out["gpus"]] == [None, "process 4242 (python3) uses it"]
    assert {p["gpu"] for p in out["paths"] if p["gpu"] is not None} == {0}, "nothing touched GPU 1"
    assert not rows(out, "gpu_to_gpu") and not rows(out, "host_to_all_gpus")
    forced = measure.measure(make(model()), sysfs=sysfs, run=busy, force=True, nbytes=16 << 20)
    assert forced["gpus"][1]["forced"] == "process 4242 (python3) uses it"
    assert rows(forced, "gpu_to_gpu", gpu=0, peer=1)

    def only_busy(argv):
        if "--query-compute-apps=gpu_bus_id,pid,process_name" in argv:
            return 0, "", ""
        return 0, "00000000:01:00.0, 6, 3\n00000000:81:00.0, 0, 2\n", ""
    out = measure.measure(make(model()), sysfs=sysfs, run=only_busy, nbytes=16 << 20)
    assert out["gpus"][0]["refused"] == "it is 6% busy"

    def model_loaded(argv):
        # inside a container, another container's server is no process nvidia-smi lists here
        if "--query-compute-apps=gpu_bus_id,pid,process_name" in argv:
            return 0, "", ""
        return 0, "00000000:01:00.0, 0, 3\n00000000:81:00.0, 0, 45210\n", ""
    out = measure.measure(make(model()), sysfs=sysfs, run=model_loaded, nbytes=16 << 20)
    assert [g.get("refused") for g in out["gpus"]] == [None, "45210 MiB of its memory is in use"]

    def no_smi(argv):
        return 127, "", "No such file or directory"
    out = measure.measure(make(model()), sysfs=sysfs, run=no_smi, nbytes=16 << 20)
    assert all(g["refused"].startswith("cannot tell whether it is in use: nvidia-smi") for g in out["gpus"])
    assert out["paths"] == []


def test_a_real_idle_h100_is_not_busy():
    """nvidia-smi's own row for an idle H100 (driver 590: tests/real_data/gpu/query-gpu-h100-590):
    0 % busy, 0 MiB used (479 MiB reserved, counted apart)."""
    import csv

    header, row = list(csv.reader((ROOT / "tests/real_data/gpu/query-gpu-h100-590").read_text().splitlines()))[:2]
    cell = dict(zip((h.strip() for h in header), (c.strip() for c in row)))
    assert (cell["utilization.gpu [%]"], cell["memory.used [MiB]"], cell["memory.reserved [MiB]"]) == ("0 %", "0 MiB", "479 MiB")

    def smi(argv):      # the same values as --format=csv,noheader,nounits prints them
        if "--query-compute-apps=gpu_bus_id,pid,process_name" in argv:
            return 0, "", ""
        return 0, f"{cell['pci.bus_id']}, {cell['utilization.gpu [%]'].split()[0]}, {cell['memory.used [MiB]'].split()[0]}\n", ""
    assert measure.busy_gpus(smi) == {}


def test_a_gpu_that_fails_mid_measurement_is_an_error_for_its_paths_alone(lab_gpus):
    make, sysfs = lab_gpus
    drv = make(model(extra="fail 1 cuMemcpyDtoHAsync_v2 700\n"))
    out = measure.measure(drv, sysfs=sysfs, run=idle, nbytes=16 << 20)
    first = rows(out, "gpu_to_host", gpu=1, numa="local")[0]
    assert first["error"] == "cuMemcpyDtoHAsync_v2 failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)"
    assert "samples" in rows(out, "host_to_gpu", gpu=1, numa="local")[0], "what ran before it stands"
    later = rows(out, "gpu_memory", gpu=1)[0]
    assert later["error"] == "GPU 1 failed earlier: " + first["error"]
    assert out["gpus"][1]["error"] == first["error"]
    assert all("samples" in p for p in out["paths"] if p["gpu"] == 0 and "peer" not in p), "GPU 0 is still measured"
    assert rows(out, "gpu_to_gpu", gpu=0, peer=1)[0]["error"].startswith("GPU 1 failed earlier: ")
    assert out["pinned_left_bytes"] == 0


def test_the_time_bound_leaves_the_rest_unmeasured(lab_gpus):
    make, sysfs = lab_gpus
    slow = model().replace("sync_local=5", "sync_local=20000")     # 20 ms a wait
    started = time.monotonic()
    out = measure.measure(make(slow), sysfs=sysfs, run=idle, nbytes=16 << 20, time_limit=0.5)
    assert time.monotonic() - started < 5
    assert out["out_of_time"] is True
    assert any(p.get("error") == "not measured: the time bound (0.5 s) was reached" for p in out["paths"])
    assert out["pinned_left_bytes"] == 0


def test_sigint_mid_measurement_gives_back_every_buffer_and_says_so(lab_gpus, tmp_path):
    """The module itself, as Ansible runs it (its arguments in a file), interrupted."""
    make, sysfs = lab_gpus
    make(model().replace("launch_local=3 launch_remote=3.5", "launch_local=2000 launch_remote=2000"))   # 2 ms a launch
    lib = sorted(tmp_path.glob("lib*/libcuda.so.1"))[-1]
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"force": True, "bytes": 16 << 20}}))
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib.parent), "PYTHONPATH": str(ROOT)}
    module = ROOT / "ansible_collections/gpuhost/stack/plugins/modules/measure.py"
    proc = subprocess.Popen([sys.executable, str(module), str(args)], stdout=subprocess.PIPE, text=True, env=env)
    time.sleep(0.7)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    result = json.loads(out)
    assert result["failed"] is True
    assert result["msg"] == "measurement interrupted by SIGINT; pinned memory still held: 0 bytes"
    assert result["measurement"]["pinned_peak_bytes"] > 0 and result["measurement"]["pinned_left_bytes"] == 0


def test_the_measurement_stops_when_its_caller_is_gone(lab_gpus, tmp_path):
    """An Ansible module's standard output is its SSH session: closed, the module stops at its
    next repeat instead of measuring on to the time bound (minutes here)."""
    make, _ = lab_gpus
    make(model().replace("launch_local=3 launch_remote=3.5", "launch_local=20000 launch_remote=20000"))  # 20 ms
    lib = sorted(tmp_path.glob("lib*/libcuda.so.1"))[-1]
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"force": True, "bytes": 16 << 20, "time_limit": 600}}))
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib.parent), "PYTHONPATH": str(ROOT)}
    module = ROOT / "ansible_collections/gpuhost/stack/plugins/modules/measure.py"
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, str(module), str(args)], stdout=write, env=env)
    os.close(write)
    time.sleep(0.7)
    os.close(read)                          # the controller's end of the session is gone
    try:
        # measured to the end, GPU 0's launch paths alone would take 24 s and both GPUs' 48:
        # it stops at the next repeat, a burst of 100 launches (2 s) later
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("the measurement went on after its caller had gone")


def test_bad_arguments_are_one_line_and_measure_nothing(tmp_path):
    module = ROOT / "ansible_collections/gpuhost/stack/plugins/modules/measure.py"
    for given, msg in (({"repeats": 3}, "repeats: at least 5, not 3"),
                       ({"bytes": 1 << 30}, "bytes: from 1048576 to 536870912, not 1073741824"),
                       ({"time_limit": 0}, "time_limit: above 0 and at most 3600 seconds, not 0")):
        args = tmp_path / "args.json"
        args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": given}))
        proc = subprocess.run([sys.executable, str(module), str(args)], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert json.loads(proc.stdout)["msg"] == msg


def test_a_host_without_the_driver_library_cannot_load_it(tmp_path):
    with pytest.raises(cudadrv.NoDriver, match="^cannot load .*libcuda.so.1: .*No such file"):
        cudadrv.Driver(str(tmp_path / "libcuda.so.1"))
