# -*- coding: utf-8 -*-
"""The CUDA runtimes on a host or in a container, found by bounded look-ups, never a walk of
the disk: CUDA toolkits (/usr/local/cuda*/version.json), libcudart in the loader's
directories (/etc/ld.so.conf.d, one level), Python environments' site-packages in the usual
places (torch/version.py, the nvidia-cuda-runtime wheels), and the operator's extra paths;
and the cuda-compat libcuda the loader would find.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import re

__metaclass__ = type

# where Python environments live on inference hosts and containers (system Python, pip
# --user, venvs, conda, uv): each pattern is a site-packages directory; globbed, never walked
SITE_PATTERNS = (
    "/usr/lib/python3*/dist-packages", "/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
    "/opt/conda/lib/python3*/site-packages", "/opt/conda/envs/*/lib/python3*/site-packages",
    "/root/miniconda3/lib/python3*/site-packages", "/root/miniconda3/envs/*/lib/python3*/site-packages",
    "/root/anaconda3/envs/*/lib/python3*/site-packages", "/root/.local/lib/python3*/site-packages",
    "/root/*/lib/python3*/site-packages", "/root/*/.venv/lib/python3*/site-packages",
    "/root/.venv/lib/python3*/site-packages", "/opt/*/lib/python3*/site-packages", "/opt/*/.venv/lib/python3*/site-packages",
    "/opt/*/venv/lib/python3*/site-packages", "/srv/*/.venv/lib/python3*/site-packages",
    "/srv/*/venv/lib/python3*/site-packages", "/home/*/.local/lib/python3*/site-packages",
    "/home/*/*/lib/python3*/site-packages", "/home/*/*/.venv/lib/python3*/site-packages",
    "/home/*/miniconda3/envs/*/lib/python3*/site-packages", "/workspace/*/lib/python3*/site-packages",
    "/workspace/.venv/lib/python3*/site-packages",
)
LOADER_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
               "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/local/lib")
MAX_SITES = 64          # a bound on the environments read, whatever a host holds


def _version(text):
    m = re.match(r"^(\d+)\.(\d+)", text or "")
    return "%s.%s" % (m.group(1), m.group(2)) if m else None


class CudaProbe:
    """Probe sections: probe_cuda (a part of probe.Probe)."""

    extra_cuda_paths = ()           # gpuhost_guest_cuda_paths: environments or site-packages to read too

    def probe_cuda(self):
        runtimes = []
        for root in self.glob("/usr/local/cuda*"):
            rel = self.rel(root)
            if os.path.islink(root):
                continue            # /usr/local/cuda -> cuda-12.8: the same toolkit once
            version = None
            try:
                data = json.loads(self.read(rel + "/version.json") or "{}")
                version = (data.get("cuda_cudart") or data.get("cuda") or {}).get("version")
            except ValueError:
                pass
            if version is None:
                m = re.search(r"CUDA Version (\d+\.\d+(?:\.\d+)?)", self.read(rel + "/version.txt") or "")
                version = m.group(1) if m else None
            if version:
                runtimes.append({"kind": "toolkit", "where": rel, "version": _version(version), "full": version})
        dirs = list(LOADER_DIRS)
        for conf in self.glob("/etc/ld.so.conf.d/*.conf"):
            for line in (self.read(self.rel(conf)) or "").splitlines():
                line = line.split("#", 1)[0].strip()
                if line.startswith("/") and line not in dirs:
                    dirs.append(line)
        compat = []
        seen = set()
        for d in dirs:
            for lib in self.glob(d + "/libcudart.so.*"):
                m = re.search(r"libcudart\.so\.(\d+\.\d+\.\d+)$", lib)
                real = os.path.realpath(lib)
                if m and real not in seen and not self.rel(lib).startswith("/usr/local/cuda"):
                    seen.add(real)
                    runtimes.append({"kind": "libcudart", "where": self.rel(lib), "version": _version(m.group(1)),
                                     "full": m.group(1)})
            for lib in self.glob(d + "/libcuda.so.*"):
                m = re.search(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$", lib)
                if m and "compat" in self.rel(lib):
                    compat.append({"where": self.rel(lib), "version": m.group(1)})
        sites = []
        for pattern in SITE_PATTERNS:
            sites += [p for p in self.glob(pattern) if p not in sites]
        for extra in self.extra_cuda_paths:
            extra = extra.rstrip("/")
            found = self.glob(extra + "/lib/python3*/site-packages") or ([self.p(extra)] if os.path.isdir(self.p(extra)) else [])
            sites += [p for p in found if p not in sites]
        for site in sites[:MAX_SITES]:
            rel = self.rel(site)
            text = self.read(rel + "/torch/version.py")
            if text is not None:
                cuda = re.search(r"^cuda\s*(?::\s*\S+)?\s*=\s*'([^']*)'", text, re.M)
                ver = re.search(r"^__version__\s*=\s*'([^']*)'", text, re.M)
                runtimes.append({"kind": "torch", "where": rel + "/torch", "version": _version(cuda.group(1)) if cuda else None,
                                 "full": ver.group(1) if ver else None})
            for info in self.glob(rel + "/nvidia_cuda_runtime_cu*-*.dist-info"):
                m = re.search(r"nvidia_cuda_runtime_cu\d+-(\d+\.\d+\.\d+)", os.path.basename(info))
                if m:
                    runtimes.append({"kind": "wheel", "where": self.rel(info), "version": _version(m.group(1)),
                                     "full": m.group(1)})
        return {"runtimes": runtimes, "compat": compat, "sites": len(sites), "sites_read": min(len(sites), MAX_SITES)}
