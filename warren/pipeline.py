"""`warren-pipeline`'s entry point, importable without Spark.

The pipeline needs the `spark` extra (PySpark, pyarrow, …), which a broker-only install
(`make run`, `pip install warren-mq`) leaves out; there the command says in one line how
to add it instead of failing on an import. With Spark present it is `warren.spark.cli`.
"""

from __future__ import annotations

import importlib.util
import sys


def main() -> int:
    if importlib.util.find_spec("pyspark") is None:
        print(
            "warren-pipeline: the pipeline needs Apache Spark, which this install leaves out:"
            " run `make pipeline` in a checkout, or pip install 'warren-mq[spark]'",
            file=sys.stderr,
        )
        return 2
    from warren.spark.cli import main as run

    return run()
