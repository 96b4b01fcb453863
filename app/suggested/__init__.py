"""GET /v1/suggested: memories worth a look now (hot, fresh, stale, decaying)."""
