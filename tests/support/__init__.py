"""Test-only helpers: servers, clusters, oracles and fault injection (never shipped in the package)."""
