"""Writing data files: compacted Parquet files and the statistics Delta records for them."""
