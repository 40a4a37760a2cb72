"""Apache Airflow provider for Delta Lake tables (and the Delta log library it is built on)."""

__version__ = "0.1.0"
