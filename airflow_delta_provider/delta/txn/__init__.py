"""Transactions: staging actions and committing a new table version (home of the commit path)."""
