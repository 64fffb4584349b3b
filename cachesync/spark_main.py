"""The main file ``spark-submit`` runs: the ``cachesync`` command line inside the Spark driver.

    spark-submit [options] .../cachesync/spark_main.py consume --engine spark --config ...

``cachesync spark-submit`` builds that invocation (consumer/spark/submit.py). Under
spark-submit the session takes the submitted master, jars, py-files and conf.
"""

from cachesync.cli import main

if __name__ == "__main__":
    main()
