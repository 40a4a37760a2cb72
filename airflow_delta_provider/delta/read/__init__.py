"""Reading a table's state: commit and checkpoint files into Arrow-backed file sets, the file index,
aggregates and the local engine's memory budget."""
