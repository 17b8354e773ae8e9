"""Stands in for the get-pip.py that ansible-test downloads from ci-files.testing.ansible.com
(unreachable from a closed CI machine) to put pip into each sanity test's virtual environment.

ansible-test runs this file as __main__ with pip's install arguments (quiet_pip.py, GET_PIP),
as it runs get-pip.py. Like get-pip.py, it runs pip from a pip wheel: the one beside it
(make sanity downloads it from PyPI), which pip can run from (a wheel is a zip on sys.path).
"""
import glob
import os
import runpy
import sys

here = os.path.dirname(os.path.abspath(__file__))
wheels = sorted(glob.glob(os.path.join(here, "pip-*.whl")))
if not wheels:
    sys.exit("no pip wheel beside %s: `make sanity` puts one there" % __file__)
sys.path.insert(0, wheels[-1])
# get-pip.py's own options: it would add setuptools and wheel unless told not to; this adds neither
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.argv = ["pip", "install"] + args
runpy.run_module("pip", run_name="__main__", alter_sys=True)
