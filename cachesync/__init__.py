"""cachesync: keep Redis consistent with MySQL. The operator and application surface."""

import zipimport as _zipimport

__version__ = "0.1.0"

# Imported from a zip (a Spark executor's py-files): the C accelerator comes with it as data.
if isinstance(__loader__, _zipimport.zipimporter):
    from cachesync.zipnative import attach as _attach
    _attach(__path__, __loader__.archive)
