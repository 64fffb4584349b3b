"""The main file ``spark-submit`` runs: the ``cachesync`` command line inside the Spark driver.

    spark-submit [options] .../cachesync/spark_main.py consume --engine spark --config ...

``cachesync spark-submit`` builds that invocation (consumer/spark/submit.py). Under
spark-submit the session takes the submitted master, jars, py-files and conf.
"""

import os
import sys

# Python puts a script's own directory first on sys.path: here that is the package
# directory, whose http.py, logs.py ... would shadow the standard library's modules.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

from cachesync.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
