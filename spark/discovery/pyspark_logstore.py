"""Spark's automatic registration of `format("logstore")`: no `register` call needed.

When a session first needs a Python data source, Spark starts its Python (the
JVM's PYSPARK_DRIVER_PYTHON, else PYSPARK_PYTHON, else `python3` on PATH) with
`pyspark.sql.worker.lookup_data_sources`, which imports every top-level module
whose name starts with `pyspark_` and registers its `DefaultSource` under that
class's `name()` (SPARK-45917, Spark 4.0+). Spark has no entry-point lookup.

This module has to sit in a directory on that Python's `sys.path`, because the
lookup lists modules with `pkgutil.iter_modules()`, which does not see the
import hook setuptools uses for logstore's editable install. Hence its own
flat distribution, `pip install -e spark/discovery` (the Makefile runs it).
"""
from logstore.spark.source import LogstoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
