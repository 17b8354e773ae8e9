"""gpuhost: audit and repair the system stack under GPU inference servers."""

__version__ = "0.1.0"
