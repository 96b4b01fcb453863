"""All SQL for memories, by what it serves; services call these with domain arguments, and nothing
else writes SQL for memories:
- writes.py: insert, update, a dedup's merge, delete and restore, a use counted, a key's lock;
- reads.py: by id or key, lists, counts, search, namespaces and stats, neighbours;
- dedup.py: a store's duplicate lookups (the same content, the nearest memory) and their lock;
- recall.py: recall's candidates (vector and keyword sides), its second round, its accesses;
- reembed.py: `engram reembed`'s walk over memories embedded by another model.

Every read filters with LIVE (app/memory/sql.py, with the other fragments other features'
repositories use): soft-deleted and expired memories vanish from every query.
"""
