"""A lab host's Python keeps the bytecode of what it imports from a zip: speed only.

Ansible sends every task's module as a zip (AnsiballZ) and Python's zipimport compiles
each module in it from source on every run, because the zip holds no .pyc (Lib/zipimport.py,
_get_module_code). On a real host that costs its own CPU; in the lab every host shares the
controller's two cores, so the same ansible.module_utils are compiled thousands of times a
test run. This keeps each compiled module, keyed by its source, in /run/gpuhost-lab-bytecode,
where init-outer mounts a directory of the lab machine's that the hosts share (never the
host's own disk), so the next task on any host unmarshals it instead.

Nothing a module does changes: the code object is the one compile() made from the same
source, given the file name of this run. Only `gpuhost lab up` with GPUHOST_LAB_BYTECODE_CACHE
naming a directory installs it (the test suite); the benchmarks measure hosts without it.
"""
import zipimport

CACHE = "/run/gpuhost-lab-bytecode"

_compile = zipimport._compile_source


def _renamed(code, filename):
    consts = tuple(_renamed(c, filename) if isinstance(c, type(code)) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _compile_source(pathname, source):
    import hashlib
    import marshal
    import os
    import sys

    # the zip's path differs for every task; the module's path inside it does not
    inner = pathname.rsplit(".zip" + os.sep, 1)[-1]
    key = hashlib.sha256(b"%s\0%s\0" % (sys.implementation.cache_tag.encode(), inner.encode()) + source).hexdigest()
    path = os.path.join(CACHE, key)
    try:
        with open(path, "rb") as f:
            return _renamed(marshal.loads(f.read()), pathname)
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = _compile(pathname, source)
    try:
        os.makedirs(CACHE, mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(marshal.dumps(code))
        os.replace(tmp, path)
    except OSError:
        pass
    return code


zipimport._compile_source = _compile_source
