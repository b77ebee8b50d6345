"""What a streaming read's source process imports before it can consume.

Spark starts a new Python process for every streaming query's source (the one that runs
`latestOffset`), and it imports `warren.spark.source` before the consumers can subscribe,
so everything that module pulls in is time the query's start waits for.
"""

from __future__ import annotations

import subprocess
import sys

NOT_FOR_READING = ("warren.spark.writer", "warren.spark.publishes", "urllib.request", "ssl")


def test_the_source_process_imports_nothing_only_writers_or_patterns_need() -> None:
    program = (
        "import sys\n"
        "import pyspark.sql.streaming.python_streaming_source_runner\n"  # what Spark starts
        "import warren.spark.source\n"
        f"print(sorted(set({NOT_FOR_READING!r}) & set(sys.modules)))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    assert ran.stdout.strip() == "[]"
