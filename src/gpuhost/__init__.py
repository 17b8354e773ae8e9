"""gpuhost: audit and repair the system stack under GPU inference servers.

The judgement, the probe and the playbooks live in the Ansible collection gpuhost.stack,
which this package carries (in a checkout, ``_collections`` links back to the tree; a
wheel holds a copy). Its ``plugins/module_utils`` are imported as the collection's own
modules, so the CLI, the playbooks' plugins and the tests judge a host with one code.
"""
import sys
from pathlib import Path

__version__ = "0.1.0"

COLLECTIONS = Path(__file__).resolve().parent / "_collections"
COLLECTION = COLLECTIONS / "ansible_collections" / "gpuhost" / "stack"
if str(COLLECTIONS) not in sys.path:
    sys.path.append(str(COLLECTIONS))
