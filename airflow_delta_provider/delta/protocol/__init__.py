"""The Delta protocol as pure functions and values: actions, log file names, log segments, replay,
table features and properties, schemas, checkpoint and commit formats. No I/O happens here."""
