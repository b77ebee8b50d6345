"""The `amqp` data source: what Spark registers, and the readers and writers it hands out.

`spark.dataSource.register(AmqpDataSource)` makes `format("amqp")` available to `read`,
`readStream`, `write` and `writeStream`. Options are parsed and checked here, on the driver,
when a query is planned (see `warren.spark.options`); a `queuePattern` becomes the queues it
matches when the reader is built (`warren.spark.management`).

The writers' module is imported when a writer is asked for: a streaming read starts a Python
process for its source, which imports this module before it can consume, and has no use for
the publishing side.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from warren.spark.management import resolved
from warren.spark.message import SCHEMA
from warren.spark.options import ReadOptions, WriteOptions
from warren.spark.reader import QueuePeekReader, QueueStreamReader


def _arrow(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects a reader's record batches in (its own conversion)."""
    return to_arrow_schema(schema, timezone="UTC")


class AmqpDataSource(DataSource):
    """Messages of an AMQP 0-9-1 queue as rows, and rows as published messages."""

    @classmethod
    def name(cls) -> str:
        return "amqp"

    def schema(self) -> str:
        # Spark asks for the schema at `load()`: the earliest point to check read options.
        ReadOptions.parse(self.options)
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return QueuePeekReader(resolved(ReadOptions.parse(self.options)), _arrow(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return QueueStreamReader(resolved(ReadOptions.parse(self.options)), _arrow(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from warren.spark.writer import AmqpWriter  # see the module's docstring

        return AmqpWriter(WriteOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from warren.spark.writer import AmqpStreamWriter  # see the module's docstring

        return AmqpStreamWriter(WriteOptions.parse(self.options))
