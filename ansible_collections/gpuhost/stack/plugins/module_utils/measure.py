# -*- coding: utf-8 -*-
"""What a GPU host delivers on each path inference uses, measured on the host through the
driver's own library (issue 38, "Prove it"). Read-only: it changes no setting.

Paths, per GPU, each from CPUs this process may run on (inside a container: its CPU set):
  host_to_gpu, gpu_to_host   pinned-memory copies from a CPU on the GPU's NUMA node
                             (numa "local") and from one on the farthest other node ("remote")
  launch, launch_sync        an empty kernel's launch, and launch plus synchronize, from a
                             CPU on the GPU's node (the path the CPU driver, governor, boost
                             and idle states move), in microseconds
  gpu_memory                 a copy inside the GPU's memory, read plus written bytes
  gpu_to_gpu                 every pair: bandwidth and a 4-byte copy's latency, with peer
                             access where the driver allows it, else through the host ("via")
  host_to_all_gpus           every GPU at once from its own node's memory: the sum a root
                             complex or a socket gives

Each is warmed up once, then timed ``repeats`` times with the driver's events (wall clock for
the launch paths, which are CPU time); the samples come back, the verdict is the controller's
(module_utils/pathproof.py). Bounds: a GPU some process uses, or one busier than
``busy_percent``, is refused unless ``force``; ``time_limit`` seconds in all, what is left
then is reported as not measured; pinned host memory at most two copy buffers a GPU (512 MiB a
buffer at most), every buffer and context given back on every way out.

Standard library only (Python 3.7+).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import os
import subprocess
import time

from ansible_collections.gpuhost.stack.plugins.module_utils import cudadrv as cu
from ansible_collections.gpuhost.stack.plugins.module_utils.cpulist import parse_cpulist

MIB = 1 << 20
DEFAULT_BYTES = 256 * MIB
MAX_BYTES = 512 * MIB           # two pinned buffers a GPU at most: 1 GiB, the bound
MIN_REPEATS = 5
LATENCY_BYTES = 4
LAUNCHES = 100                  # launches a timed repeat of the launch paths
LATENCY_COPIES = 100            # small peer copies a timed repeat of the latency path
CHECK_BYTES = 64 << 10          # the pattern a peer copy must deliver


class Interrupted(Exception):
    """A signal arrived mid-measurement; what was allocated is given back on the way out."""


class OutOfTime(Exception):
    pass


# ---- the host's CPUs and GPUs as Linux shows them -------------------------------------------------
def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except (IOError, OSError):
        return None


def node_cpus(sysfs="/sys", allowed=None):
    """{node: [CPUs]} of the CPUs this process may run on (its affinity: a container's CPU
    set), by /sys/devices/system/node/node<N>/cpulist; nodes with none of them left out."""
    allowed = set(os.sched_getaffinity(0) if allowed is None else allowed)
    base = os.path.join(sysfs, "devices/system/node")
    out = {}
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        if name.startswith("node") and name[4:].isdigit():
            cpus = sorted(set(parse_cpulist(read(os.path.join(base, name, "cpulist")) or "")) & allowed)
            if cpus:
                out[int(name[4:])] = cpus
    if not out:
        out[0] = sorted(allowed)        # no NUMA information: one node
    return out


def node_distances(sysfs, node):
    text = read(os.path.join(sysfs, "devices/system/node/node%d/distance" % node)) or ""
    return [int(x) for x in text.split() if x.isdigit()]


def gpu_node(sysfs, bus_id):
    """The GPU's NUMA node (the PCI device's numa_node), or None where the firmware gives
    none (-1)."""
    text = read(os.path.join(sysfs, "bus/pci/devices", bus_id.lower(), "numa_node"))
    try:
        node = int(text)
    except (TypeError, ValueError):
        return None
    return node if node >= 0 else None


def farthest_node(sysfs, node, nodes):
    """The other node (with CPUs this process may use) farthest from *node*: a CPU on it is
    the worst a misplaced thread sees. None where there is no other."""
    others = [n for n in nodes if n != node]
    if not others:
        return None
    # nodeN/distance lists the distance to each online node in node order (drivers/base/node.c
    # node_read_distance: for_each_online_node), so a gap in the numbering shifts the columns
    base = os.path.join(sysfs, "devices/system/node")
    online = sorted(int(d[4:]) for d in (os.listdir(base) if os.path.isdir(base) else [])
                    if d.startswith("node") and d[4:].isdigit())
    dist = dict(zip(online, node_distances(sysfs, node))) if node is not None else {}
    return max(others, key=lambda n: (dist.get(n, 0), -n))


def run_command(argv):
    """(rc, stdout, stderr) of a command, as AnsibleModule.run_command gives them."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=30, env=dict(os.environ, LC_ALL="C"), check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def bus_key(text):
    """A PCI address as (domain, bus, device, function) numbers, however it is written:
    nvidia-smi's 00000000:01:00.0, the driver's 0000:01:00.0, a 5-digit VMD domain."""
    parts = text.strip().lower().replace(".", ":").split(":")
    try:
        return tuple(int(p, 16) for p in parts[-4:]) if len(parts) >= 4 else None
    except ValueError:
        return None


# More memory in use than an idle GPU shows: a loaded model, whose server nvidia-smi inside a
# container may not list (it shows no process of another PID namespace). An idle H100 on
# driver 590 reports 0 MiB used, its 479 MiB reservation apart (tests/real_data/gpu/
# query-gpu-h100-590).
BUSY_MIB = 2048


def busy_gpus(run=run_command, threshold=5):
    """{bus_key: why it counts as in use} from nvidia-smi: any compute process on it,
    utilisation above *threshold* percent, or more than BUSY_MIB of its memory in use.
    Raises ValueError where nvidia-smi cannot say."""
    def query(args):
        rc, out, err = run(["nvidia-smi"] + args + ["--format=csv,noheader,nounits"])
        if rc != 0:
            raise ValueError("nvidia-smi %s exited %d: %s" % (args[0], rc, (err or out).strip()[:200]))
        return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]

    out = {}
    for row in query(["--query-compute-apps=gpu_bus_id,pid,process_name"]):
        if len(row) >= 2 and "no running" not in row[0].lower():
            out.setdefault(bus_key(row[0]), "process %s (%s) uses it" % (row[1], row[2] if len(row) > 2 else "?"))
    for row in query(["--query-gpu=pci.bus_id,utilization.gpu,memory.used"]):
        if len(row) >= 2 and row[1].isdigit() and int(row[1]) > threshold:
            out.setdefault(bus_key(row[0]), "it is %s%% busy" % row[1])
        if len(row) >= 3 and row[2].isdigit() and int(row[2]) > BUSY_MIB:
            out.setdefault(bus_key(row[0]), "%s MiB of its memory is in use" % row[2])
    return out


# ---- resources: everything allocated is recorded, and freed in reverse ---------------------------
class Held:
    def __init__(self, drv):
        self.drv = drv
        self.items = []
        self.pinned = 0
        self.pinned_peak = 0
        self.release_errors = []

    def keep(self, free_call, handle, pinned=0):
        self.items.append((free_call, handle, pinned))
        self.pinned += pinned
        self.pinned_peak = max(self.pinned_peak, self.pinned)
        return handle

    def free(self, handle):
        for i in range(len(self.items) - 1, -1, -1):
            if self.items[i][1] is handle or self.items[i][1] == handle:
                call, h, pinned = self.items.pop(i)
                self.pinned -= pinned
                self._release(call, h)
                return

    def _release(self, call, handle):
        name, ctx = call
        try:
            if ctx is not None:         # a context's resources are freed with it current
                self.drv.call("cuCtxSetCurrent", ctx)
            self.drv.call(name, handle)
        except cu.CudaError as exc:
            self.release_errors.append(str(exc))

    def close(self):
        while self.items:
            call, handle, pinned = self.items.pop()
            self.pinned -= pinned
            self._release(call, handle)


class Gpu:
    def __init__(self, index, dev, bus_id, name, node):
        self.index, self.dev, self.bus_id, self.name, self.node = index, dev, bus_id, name, node
        self.ctx = self.stream = self.start = self.end = None
        self.refused = None
        self.forced = None
        self.error = None           # the first failed call: the GPU's later paths are that error too
        self.local_host = None      # its node's pinned buffer, kept for host_to_all_gpus
        self.buf = None             # device buffer of the copy size


class Measurement:
    def __init__(self, drv, repeats=MIN_REPEATS, nbytes=DEFAULT_BYTES, time_limit=60.0, sysfs="/sys",
                 clock=time.monotonic, alive=None):
        self.drv, self.repeats, self.nbytes, self.sysfs = drv, repeats, nbytes, sysfs
        self.clock = clock
        self.deadline = clock() + time_limit
        self.time_limit = time_limit
        self.held = Held(drv)
        self.paths = []
        self.gpus = []
        self.out_of_time = False
        self.alive = alive          # False once whoever asked for the measurement is gone

    # ---- placement ---------------------------------------------------------------------------
    @staticmethod
    def on_cpus(cpus):
        """Run this thread on *cpus* (a context manager that puts the old set back)."""
        class Pin:
            def __enter__(self):
                self.old = os.sched_getaffinity(0)
                os.sched_setaffinity(0, cpus)

            def __exit__(self, *exc):
                os.sched_setaffinity(0, self.old)
                return False
        return Pin()

    def check_time(self):
        """Between repeats: stop at the time bound, or when the caller has gone."""
        if self.alive is not None and not self.alive():
            raise Interrupted("the controller went away")
        if self.clock() > self.deadline:
            self.out_of_time = True
            raise OutOfTime("not measured: the time bound (%g s) was reached" % self.time_limit)

    # ---- driver set-up ---------------------------------------------------------------------------
    def open_gpus(self, wanted=None):
        drv = self.drv
        drv.call("cuInit", 0)
        count = drv.out("cuDeviceGetCount", ctypes.c_int)
        for i in range(count):
            dev = drv.out("cuDeviceGet", ctypes.c_int, i)
            bus_id = drv.text("cuDeviceGetPCIBusId", dev, 32).lower()
            name = drv.text("cuDeviceGetName", dev, 256)
            if wanted and str(i) not in wanted and bus_id not in wanted and bus_id[5:] not in wanted:
                continue
            self.gpus.append(Gpu(i, dev, bus_id, name, gpu_node(self.sysfs, bus_id)))
        return count

    def attach(self, gpu):
        drv = self.drv
        ctx = drv.out("cuDevicePrimaryCtxRetain", ctypes.c_void_p, gpu.dev)
        self.held.keep(("cuDevicePrimaryCtxRelease_v2", None), gpu.dev)    # the release takes the device
        gpu.ctx = ctx
        drv.call("cuCtxSetCurrent", ctx)
        gpu.stream = self.held.keep(("cuStreamDestroy_v2", ctx),
                                    drv.out("cuStreamCreate", ctypes.c_void_p, cu.CU_STREAM_NON_BLOCKING))
        gpu.start = self.held.keep(("cuEventDestroy_v2", ctx), drv.out("cuEventCreate", ctypes.c_void_p, cu.CU_EVENT_DEFAULT))
        gpu.end = self.held.keep(("cuEventDestroy_v2", ctx), drv.out("cuEventCreate", ctypes.c_void_p, cu.CU_EVENT_DEFAULT))

    def host_buffer(self, gpu, nbytes):
        self.drv.call("cuCtxSetCurrent", gpu.ctx)
        ptr = self.drv.out("cuMemHostAlloc", ctypes.c_void_p, nbytes, cu.CU_MEMHOSTALLOC_PORTABLE)
        return self.held.keep(("cuMemFreeHost", gpu.ctx), ptr, pinned=nbytes)

    def device_buffer(self, gpu, nbytes):
        self.drv.call("cuCtxSetCurrent", gpu.ctx)
        return self.held.keep(("cuMemFree_v2", gpu.ctx), self.drv.out("cuMemAlloc_v2", ctypes.c_uint64, nbytes))

    # ---- timing ------------------------------------------------------------------------------------
    def timed_ms(self, gpu, enqueue):
        """Milliseconds of one enqueued operation on the GPU's stream, by its events: a warm-up,
        then ``repeats`` samples."""
        drv = self.drv
        drv.call("cuCtxSetCurrent", gpu.ctx)
        enqueue()
        drv.call("cuStreamSynchronize", gpu.stream)
        samples = []
        for dummy in range(self.repeats):
            self.check_time()
            drv.call("cuEventRecord", gpu.start, gpu.stream)
            enqueue()
            drv.call("cuEventRecord", gpu.end, gpu.stream)
            drv.call("cuEventSynchronize", gpu.end)
            samples.append(self.elapsed_ms(gpu.start, gpu.end))
        return samples

    def elapsed_ms(self, start, end):
        ms = ctypes.c_float()
        self.drv.call("cuEventElapsedTime", ctypes.byref(ms), start, end)
        return float(ms.value)

    def gbs(self, nbytes, samples_ms):
        return [round(nbytes / (ms / 1000.0) / 1e9, 3) if ms > 0 else None for ms in samples_ms]

    def record(self, path, gpu, unit, samples=None, error=None, **extra):
        row = {"path": path, "gpu": gpu.index, "bus_id": gpu.bus_id, "unit": unit}
        row.update(extra)
        if error is not None:
            row["error"] = error
        else:
            row["samples"] = samples
        self.paths.append(row)
        return row

    def attempt(self, gpus, path, unit, body, **extra):
        """One path: its samples, or the error that stopped it (the first failed call of a GPU
        marks that GPU, whose later paths say so without calling the driver again)."""
        gpu = gpus[0]
        broken = next((g for g in gpus if g.error), None)
        if broken is not None:
            return self.record(path, gpu, unit, error="GPU %d failed earlier: %s" % (broken.index, broken.error), **extra)
        try:
            self.check_time()
            return self.record(path, gpu, unit, samples=body(), **extra)
        except OutOfTime as exc:
            return self.record(path, gpu, unit, error=str(exc), **extra)
        except cu.CudaError as exc:
            if len(gpus) == 1:          # a pair's failure is not pinned on either GPU
                gpu.error = str(exc)
            return self.record(path, gpu, unit, error=str(exc), **extra)

    # ---- the paths ---------------------------------------------------------------------------------
    def host_paths(self, gpu, nodes):
        drv, n = self.drv, self.nbytes
        self.check_time()               # past the bound: allocate nothing more
        gpu.buf = self.device_buffer(gpu, n)
        local = gpu.node if gpu.node in nodes else None
        places = [("local", local if local is not None else min(nodes))]
        remote = farthest_node(self.sysfs, local, nodes) if local is not None else None
        if remote is not None:
            places.append(("remote", remote))
        for numa, node in places:
            with self.on_cpus(nodes[node]):
                host = self.host_buffer(gpu, n)
                if numa == "local":
                    gpu.local_host = host
                where = dict(cpu_node=node, numa=numa if local is not None else "unknown", bytes=n)
                self.attempt([gpu], "host_to_gpu", "GB/s", lambda: self.gbs(n, self.timed_ms(
                    gpu, lambda: drv.call("cuMemcpyHtoDAsync_v2", gpu.buf, host, n, gpu.stream))), **where)
                self.attempt([gpu], "gpu_to_host", "GB/s", lambda: self.gbs(n, self.timed_ms(
                    gpu, lambda: drv.call("cuMemcpyDtoHAsync_v2", host, gpu.buf, n, gpu.stream))), **where)
                if numa == "remote":
                    self.held.free(host)
        node = places[0][1]
        with self.on_cpus(nodes[node]):
            self.attempt([gpu], "launch", "us", lambda: self.launch_us(gpu, sync=False), cpu_node=node)
            self.attempt([gpu], "launch_sync", "us", lambda: self.launch_us(gpu, sync=True), cpu_node=node)
        self.attempt([gpu], "gpu_memory", "GB/s", lambda: self.gpu_memory(gpu), bytes=n)

    def launch_us(self, gpu, sync):
        drv = self.drv
        drv.call("cuCtxSetCurrent", gpu.ctx)
        module = self.held.keep(("cuModuleUnload", gpu.ctx), self.load_empty_kernel())
        try:
            fn = ctypes.c_void_p()
            drv.call("cuModuleGetFunction", ctypes.byref(fn), module, cu.EMPTY_KERNEL)

            def burst():
                t0 = time.perf_counter()
                for dummy in range(LAUNCHES):
                    drv.call("cuLaunchKernel", fn, 1, 1, 1, 1, 1, 1, 0, gpu.stream, None, None)
                    if sync:
                        drv.call("cuStreamSynchronize", gpu.stream)
                t1 = time.perf_counter()
                drv.call("cuStreamSynchronize", gpu.stream)
                return (t1 - t0) / LAUNCHES * 1e6

            burst()                     # warm-up: the driver compiles the PTX at load, caches at first launch
            samples = []
            for dummy in range(self.repeats):
                self.check_time()
                samples.append(round(burst(), 3))
            return samples
        finally:
            self.held.free(module)

    def load_empty_kernel(self):
        """The empty kernel's module: the first PTX target the driver compiles."""
        for i, ptx in enumerate(cu.EMPTY_PTX):
            try:
                return self.drv.out("cuModuleLoadData", ctypes.c_void_p, ptx)
            except cu.CudaError as exc:
                if i + 1 == len(cu.EMPTY_PTX) or exc.name not in cu.PTX_REFUSED:
                    raise
        return None

    def gpu_memory(self, gpu):
        n = self.nbytes
        other = self.device_buffer(gpu, n)
        try:
            ms = self.timed_ms(gpu, lambda: self.drv.call("cuMemcpyDtoDAsync_v2", other, gpu.buf, n, gpu.stream))
            return self.gbs(2 * n, ms)         # each byte read once and written once
        finally:
            self.held.free(other)

    def pair_paths(self, a, b):
        drv, n = self.drv, self.nbytes
        can = (drv.out("cuDeviceCanAccessPeer", ctypes.c_int, a.dev, b.dev)
               and drv.out("cuDeviceCanAccessPeer", ctypes.c_int, b.dev, a.dev))
        enabled = []
        try:
            if can:
                for x, y in ((a, b), (b, a)):
                    drv.call("cuCtxSetCurrent", x.ctx)
                    code = drv.status("cuCtxEnablePeerAccess", y.ctx, 0)
                    if code not in (cu.CUDA_SUCCESS, cu.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED):
                        raise cu.CudaError("cuCtxEnablePeerAccess", code, drv.error_name(code))
                    enabled.append((x, y))
            via = "peer" if can else "host"
            extra = dict(peer=b.index, peer_bus_id=b.bus_id, via=via)
            self.check_time()
            delivered = self.delivered(a, b)
            checked = {} if delivered is None else {"delivered": delivered}

            def copy(size, times=1):
                def enqueue():
                    for dummy in range(times):
                        drv.call("cuMemcpyPeerAsync", b.buf, b.ctx, a.buf, a.ctx, size, a.stream)
                return enqueue
            self.attempt([a, b], "gpu_to_gpu", "GB/s", lambda: self.gbs(n, self.timed_ms(a, copy(n))), bytes=n,
                         **extra, **checked)
            # p2pBandwidthLatencyTest's way: many small copies between two events, a copy's share
            self.attempt([a, b], "gpu_to_gpu_latency", "us",
                         lambda: [round(ms * 1000 / LATENCY_COPIES, 3)
                                  for ms in self.timed_ms(a, copy(LATENCY_BYTES, LATENCY_COPIES))],
                         bytes=LATENCY_BYTES, **extra)
        finally:
            for x, y in enabled:
                try:
                    drv.call("cuCtxSetCurrent", x.ctx)
                    drv.call("cuCtxDisablePeerAccess", y.ctx)
                except cu.CudaError as exc:
                    self.held.release_errors.append(str(exc))

    def delivered(self, a, b):
        """Whether a peer copy delivers its bytes: a pattern from GPU a's host buffer to a, from
        a to b, back from b into a cleared part of the buffer, compared. A platform can drop
        peer writes while the copy reports success (a translating IOMMU: the CUDA Programming
        Guide, "IOMMU on Linux"), and a dropped copy times as fast as one that arrived.
        None where a has no host buffer to check with."""
        host = a.local_host
        if host is None:
            return None
        drv, size = self.drv, CHECK_BYTES
        pattern = os.urandom(size)      # new for each pair: what an earlier check left cannot match it
        ctypes.memmove(host, pattern, size)
        back = host + size
        ctypes.memset(back, 0, size)
        drv.call("cuCtxSetCurrent", a.ctx)
        drv.call("cuMemcpyHtoDAsync_v2", a.buf, host, size, a.stream)
        drv.call("cuMemcpyPeerAsync", b.buf, b.ctx, a.buf, a.ctx, size, a.stream)
        drv.call("cuStreamSynchronize", a.stream)
        drv.call("cuCtxSetCurrent", b.ctx)
        drv.call("cuMemcpyDtoHAsync_v2", back, b.buf, size, b.stream)
        drv.call("cuStreamSynchronize", b.stream)
        return ctypes.string_at(back, size) == pattern

    def all_gpus_path(self, gpus, nodes):
        """Every GPU copying from its own node's memory at once: all the bytes over the time of
        the longest copy (each GPU's events are its own, so no common clock; the copies start
        together, and the last to end bounds the whole)."""
        drv, n = self.drv, self.nbytes
        ready = [g for g in gpus if g.local_host is not None and not g.error]
        if len(ready) < 2:
            return

        def body():
            totals = []
            for rep in range(self.repeats + 1):
                self.check_time()
                for g in ready:
                    drv.call("cuCtxSetCurrent", g.ctx)
                    drv.call("cuEventRecord", g.start, g.stream)
                    drv.call("cuMemcpyHtoDAsync_v2", g.buf, g.local_host, n, g.stream)
                    drv.call("cuEventRecord", g.end, g.stream)
                longest = 0.0
                for g in ready:
                    drv.call("cuCtxSetCurrent", g.ctx)
                    drv.call("cuEventSynchronize", g.end)
                    longest = max(longest, self.elapsed_ms(g.start, g.end))
                if rep and longest > 0:           # the first round warms up
                    totals.append(round(n * len(ready) / (longest / 1000.0) / 1e9, 3))
            return totals
        row = self.attempt(ready[:1], "host_to_all_gpus", "GB/s", body, members=[g.index for g in ready], bytes=n)
        row["gpu"] = None
        row.pop("bus_id", None)


def stdout_open(fd=1):
    """Whether this process's standard output still has a reader: an Ansible module's is the
    SSH session, gone (POLLERR or POLLHUP) once the controller was interrupted or died."""
    import select

    poller = select.poll()
    poller.register(fd, 0)
    return not any(ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for dummy, ev in poller.poll(0))


def measure(drv, wanted=None, repeats=MIN_REPEATS, nbytes=DEFAULT_BYTES, time_limit=60.0, force=False,
            busy_percent=5, sysfs="/sys", run=run_command, alive=None):
    """The whole measurement of this host, as one plain dict (see the module's RETURN)."""
    started = time.monotonic()
    m = Measurement(drv, repeats=repeats, nbytes=nbytes, time_limit=time_limit, sysfs=sysfs, alive=alive)
    out = {"method": "modelled" if drv.modelled else "measured", "repeats": repeats, "bytes": nbytes,
           "time_limit_s": time_limit, "gpus": [], "paths": m.paths}
    try:
        try:
            count = m.open_gpus(wanted)
        except cu.CudaError as exc:
            if exc.name in ("CUDA_ERROR_NO_DEVICE",):
                out["na"] = "no NVIDIA GPU the driver can use (%s)" % exc
                return out
            raise
        out["driver_version"] = drv.out("cuDriverGetVersion", ctypes.c_int)
        out["devices"] = count
        nodes = node_cpus(sysfs)
        out["cpus"] = {str(k): v for k, v in sorted(nodes.items())}
        try:
            in_use = busy_gpus(run, threshold=busy_percent)
            unknown = None
        except ValueError as exc:
            in_use, unknown = {}, "cannot tell whether it is in use: %s" % exc
        for g in m.gpus:
            why = in_use.get(bus_key(g.bus_id)) or unknown
            if why and force:
                g.forced = why
            elif why:
                g.refused = why
        live = [g for g in m.gpus if not g.refused]
        for g in live:
            try:
                m.attach(g)
            except cu.CudaError as exc:
                g.error = str(exc)
        for g in live:
            if not g.error:
                try:
                    m.host_paths(g, nodes)
                except OutOfTime as exc:
                    m.record("host_to_gpu", g, "GB/s", error=str(exc))
                except cu.CudaError as exc:
                    g.error = str(exc)
                    m.record("host_to_gpu", g, "GB/s", error=str(exc))
        ready = [g for g in live if g.buf is not None]
        for i, a in enumerate(ready):
            for b in ready[i + 1:]:
                pair = dict(peer=b.index, peer_bus_id=b.bus_id)
                broken = a if a.error else b if b.error else None
                if broken is not None:      # no driver call on a GPU that failed
                    m.record("gpu_to_gpu", a, "GB/s", error="GPU %d failed earlier: %s" % (broken.index, broken.error),
                             **pair)
                    continue
                try:
                    m.pair_paths(a, b)
                except (cu.CudaError, OutOfTime) as exc:
                    m.record("gpu_to_gpu", a, "GB/s", error=str(exc), **pair)
        m.all_gpus_path(ready, nodes)
    except Interrupted as exc:
        # a signal: what was measured so far stays in the result, the rest is given back below
        out["interrupted"] = str(exc)
    finally:
        out["gpus"] = [{"index": g.index, "bus_id": g.bus_id, "name": g.name, "numa_node": g.node,
                        **({"refused": g.refused} if g.refused else {}),
                        **({"forced": g.forced} if g.forced else {}),
                        **({"error": g.error} if g.error else {})} for g in m.gpus]
        m.held.close()
        out["pinned_peak_bytes"] = m.held.pinned_peak
        out["pinned_left_bytes"] = m.held.pinned
        if m.held.release_errors:
            out["release_errors"] = m.held.release_errors
        out["out_of_time"] = m.out_of_time
        out["elapsed_s"] = round(time.monotonic() - started, 3)
    return out
