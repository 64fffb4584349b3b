"""cachesync: keep Redis consistent with MySQL. The operator and application surface."""

import zipimport as _zipimport

__version__ = "0.1.0"
# the name on the package index (pip install); the import name and the command are `cachesync`
DISTRIBUTION = "cachesync-mysql"


def install_hint(extras: str = "") -> str:
    """The pip command that installs ``extras`` (comma-separated) of this distribution."""
    return f"pip install '{DISTRIBUTION}[{extras}]'" if extras else f"pip install {DISTRIBUTION}"


# Imported from a zip (a Spark executor's py-files): the C accelerator comes with it as data.
if isinstance(__loader__, _zipimport.zipimporter):
    from cachesync.runtime.zipnative import attach as _attach
    _attach(__path__, __loader__.archive)
