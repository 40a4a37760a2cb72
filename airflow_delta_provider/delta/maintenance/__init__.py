"""Table maintenance built on `txn`: checkpoints, log cleanup, VACUUM and OPTIMIZE."""
