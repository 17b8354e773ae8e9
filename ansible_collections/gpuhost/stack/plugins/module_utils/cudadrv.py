# -*- coding: utf-8 -*-
"""The CUDA driver API through ctypes, as `gpuhost prove` uses it on a host (issue 38).

The driver's own ``libcuda.so.1`` is installed with every NVIDIA driver, so a host needs no
CUDA toolkit and no pip. Every call's result is checked: a failure becomes a CudaError
naming the call and the driver's name for the code (cuGetErrorName), never a traceback.

Signatures and symbol names are cuda.h's: the calls whose ABI changed are exported with a
``_v2`` suffix (cuda.h's ``#define cuMemAlloc cuMemAlloc_v2`` and the like), and those are the
names looked up here. The lab's stand-in library answers the same calls by the same names
and says what it is through the extra symbol ``gpuhost_lab_model``: a figure it gives is
``modelled``, one from any other library ``measured``.

Standard library only (Python 3.7+).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes

c_int, c_uint, c_size_t, c_void_p, c_char_p, c_float, c_u64 = (
    ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_float, ctypes.c_uint64)
P = ctypes.POINTER

# cuda.h: CUresult values the measurement names itself
CUDA_SUCCESS = 0
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704

# cuda.h flags
CU_MEMHOSTALLOC_PORTABLE = 0x01      # pinned memory every context sees as pinned
CU_STREAM_NON_BLOCKING = 0x1         # no implicit synchronisation with the NULL stream
CU_EVENT_DEFAULT = 0x0

# name -> argument types; every function returns a CUresult (an int)
SIGNATURES = {
    "cuInit": (c_uint,),
    "cuDriverGetVersion": (P(c_int),),
    "cuDeviceGetCount": (P(c_int),),
    "cuDeviceGet": (P(c_int), c_int),
    "cuDeviceGetName": (c_char_p, c_int, c_int),
    "cuDeviceGetPCIBusId": (c_char_p, c_int, c_int),
    "cuDeviceCanAccessPeer": (P(c_int), c_int, c_int),
    "cuDevicePrimaryCtxRetain": (P(c_void_p), c_int),
    "cuDevicePrimaryCtxRelease_v2": (c_int,),
    "cuCtxSetCurrent": (c_void_p,),
    "cuCtxSynchronize": (),
    "cuCtxEnablePeerAccess": (c_void_p, c_uint),
    "cuCtxDisablePeerAccess": (c_void_p,),
    "cuMemAlloc_v2": (P(c_u64), c_size_t),
    "cuMemFree_v2": (c_u64,),
    "cuMemHostAlloc": (P(c_void_p), c_size_t, c_uint),
    "cuMemFreeHost": (c_void_p,),
    "cuMemcpyHtoDAsync_v2": (c_u64, c_void_p, c_size_t, c_void_p),
    "cuMemcpyDtoHAsync_v2": (c_void_p, c_u64, c_size_t, c_void_p),
    "cuMemcpyDtoDAsync_v2": (c_u64, c_u64, c_size_t, c_void_p),
    "cuMemcpyPeerAsync": (c_u64, c_void_p, c_u64, c_void_p, c_size_t, c_void_p),
    "cuStreamCreate": (P(c_void_p), c_uint),
    "cuStreamDestroy_v2": (c_void_p,),
    "cuStreamSynchronize": (c_void_p,),
    "cuEventCreate": (P(c_void_p), c_uint),
    "cuEventDestroy_v2": (c_void_p,),
    "cuEventRecord": (c_void_p, c_void_p),
    "cuEventSynchronize": (c_void_p,),
    "cuEventElapsedTime": (P(c_float), c_void_p, c_void_p),
    "cuEventElapsedTime_v2": (P(c_float), c_void_p, c_void_p),
    "cuModuleLoadData": (P(c_void_p), c_char_p),
    "cuModuleUnload": (c_void_p,),
    "cuModuleGetFunction": (P(c_void_p), c_void_p, c_char_p),
    "cuLaunchKernel": (c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p,
                       c_void_p, c_void_p),
    "cuGetErrorName": (c_int, P(c_char_p)),
}

# a call exported under a newer name by newer drivers: the first name found is used (CUDA 12.8
# added cuEventElapsedTime_v2 and 13.0's cuda.h maps the name to it; older drivers have only
# the first version, with the same signature)
NEWER = {"cuEventElapsedTime": ("cuEventElapsedTime_v2", "cuEventElapsedTime")}

# An empty kernel, as PTX the driver compiles for whatever GPU it runs on: PTX is forward
# compatible (CUDA C++ Programming Guide, "Application Compatibility": PTX code "can be
# compiled at runtime ... for any compute capability" newer than the one it targets), so
# sm_50 PTX runs from Maxwell to Blackwell. CUDA 13 dropped building for sm_50 to sm_72; should a
# driver stop compiling such PTX too, the same kernel for sm_75 (Turing on) is tried next.
EMPTY_KERNEL = b"gpuhost_empty"
EMPTY_PTX = tuple(b".version 6.4\n.target %s\n.address_size 64\n\n.visible .entry gpuhost_empty()\n{\n\tret;\n}\n\x00"
                  % target for target in (b"sm_50", b"sm_75"))


# what cuModuleLoadData answers PTX the driver will not compile (cuda.h)
PTX_REFUSED = ("CUDA_ERROR_INVALID_PTX", "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "CUDA_ERROR_NO_BINARY_FOR_GPU",
               "CUDA_ERROR_INVALID_IMAGE")


class NoDriver(Exception):
    """No driver library to load (no NVIDIA driver on this host)."""


class CudaError(Exception):
    """A driver call that failed: the call, the code and the driver's name for it."""

    def __init__(self, call, code, name):
        Exception.__init__(self, "%s failed: %s (%d)" % (call, name, code))
        self.call, self.code, self.name = call, code, name


class Driver:
    """libcuda.so.1, loaded once; ``call`` runs one function and checks its result."""

    def __init__(self, path="libcuda.so.1"):
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as exc:
            raise NoDriver("cannot load %s: %s" % (path, exc))
        self.modelled = self._has("gpuhost_lab_model")
        self._fns = {}

    def _has(self, symbol):
        try:
            getattr(self.lib, symbol)
        except AttributeError:
            return False
        return True

    def fn(self, name):
        f = self._fns.get(name)
        if f is None:
            for symbol in NEWER.get(name, (name,)):
                if self._has(symbol):
                    f = getattr(self.lib, symbol)
                    break
            else:
                raise CudaError(name, -1, "not exported by this driver's libcuda.so.1")
            f.argtypes = list(SIGNATURES[name])
            f.restype = c_int
            self._fns[name] = f
        return f

    def error_name(self, code):
        name = c_char_p()
        try:
            if self.fn("cuGetErrorName")(code, ctypes.byref(name)) == CUDA_SUCCESS and name.value:
                return name.value.decode("ascii", "replace")
        except CudaError:
            pass
        return "CUDA error"

    def call(self, name, *args):
        code = self.fn(name)(*args)
        if code != CUDA_SUCCESS:
            raise CudaError(name, code, self.error_name(code))

    def status(self, name, *args):
        """The call's CUresult, unchecked (for the codes a caller expects, such as
        CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)."""
        return self.fn(name)(*args)

    # ---- the few values the measurement reads back -------------------------------------------
    def out(self, name, ctype, *args):
        value = ctype()
        self.call(name, ctypes.byref(value), *args)
        return value.value

    def text(self, name, device, size=256):
        buf = ctypes.create_string_buffer(size)
        self.call(name, buf, size, device)
        return buf.value.decode("ascii", "replace")
