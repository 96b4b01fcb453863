"""Export and import of a wallet's memories (GET /v1/export, POST /v1/import)."""
