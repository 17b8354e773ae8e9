"""gpuhost.runs is the collection's plugins/module_utils/runs.py (one code for CLI and plugins)."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("ansible_collections.gpuhost.stack.plugins.module_utils.runs")
