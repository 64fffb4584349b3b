"""The compiled accelerator, the one thing pyproject.toml cannot declare conditionally.

Built by `pip install` where a C compiler and Python's headers are present; optional, so an
install without them still succeeds and schema/partition.py falls back to its pure-Python
functions. CACHESYNC_PURE=1 leaves it out: `make dist` builds the `py3-none-any` wheel so.
"""

import os

from setuptools import Extension, setup

PURE = os.environ.get("CACHESYNC_PURE") == "1"
SPEEDUPS = Extension("cachesync._speedups", ["cachesync/_speedups.c"], optional=True)

setup(ext_modules=[] if PURE else [SPEEDUPS])
