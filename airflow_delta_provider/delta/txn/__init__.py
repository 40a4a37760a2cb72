"""Transactions: staging actions and committing a new table version (home of the commit path)."""

from .transaction import DEFAULT_MAX_RETRIES, Transaction, engine_info, start_transaction

__all__ = ["DEFAULT_MAX_RETRIES", "Transaction", "engine_info", "start_transaction"]
