"""cachesync: keep Redis consistent with MySQL. The operator and application surface."""

import os as _os
import zipimport as _zipimport

__version__ = "0.1.0"
# the name on the package index (pip install); the import name and the command are `cachesync`
DISTRIBUTION = "cachesync-mysql"


def install_hint(extras: str = "") -> str:
    """The pip command that installs ``extras`` (comma-separated) of this distribution."""
    return f"pip install '{DISTRIBUTION}[{extras}]'" if extras else f"pip install {DISTRIBUTION}"


# set (non-empty) in the environment: every compiled path of cachesync._speedups is switched off
# and its pure-Python twin runs (same results, slower); the tests run both ways
NO_SPEEDUPS = "CACHESYNC_NO_SPEEDUPS"


def speedups():
    """The compiled accelerator ``cachesync._speedups``, or None: not built (no C compiler at
    install) or switched off with ``CACHESYNC_NO_SPEEDUPS=1``. Read when a module loads."""
    if _os.environ.get(NO_SPEEDUPS):
        return None
    try:
        from cachesync import _speedups
    except ImportError:
        return None
    return _speedups


# Imported from a zip (a Spark executor's py-files): the C accelerator comes with it as data.
if isinstance(__loader__, _zipimport.zipimporter):
    from cachesync.runtime.zipnative import attach as _attach
    _attach(__path__, __loader__.archive)
