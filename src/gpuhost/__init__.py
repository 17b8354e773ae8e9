"""gpuhost: audit and repair the system stack under GPU inference servers.

The judgement, the probe and the playbooks live in the Ansible collection gpuhost.stack,
a real directory ``ansible_collections/gpuhost/stack``: at the top of a checkout, and
beside this package in site-packages once the wheel is installed (where ansible-core's
collection loader looks, as it scans sys.path). Its ``plugins/module_utils`` are imported
as the collection's own modules (``ansible_collections.gpuhost.stack.plugins.module_utils``),
so the CLI, the playbooks' plugins and the tests judge a host with one code.
"""
import sys
from pathlib import Path

__version__ = "0.4.0"

_HERE = Path(__file__).resolve().parent
# the directory that holds ansible_collections/: site-packages for the wheel, the checkout's top
COLLECTIONS = next((p for p in (_HERE.parent, _HERE.parents[1])
                    if (p / "ansible_collections/gpuhost/stack/galaxy.yml").is_file()), _HERE.parent)
COLLECTION = COLLECTIONS / "ansible_collections" / "gpuhost" / "stack"
if str(COLLECTIONS) not in sys.path:
    sys.path.append(str(COLLECTIONS))
