"""Authorization in one place: who acts in a request, for which owner, and how far they reach.

- rules.py: plain rules (no HTTP): the `Actor` a memory operation is done by, and what an agent
  key's delegation lets it reach (`kept_to`);
- requests.py: read off the request once, as the `acting` dependency (`Acting`): the owner a
  grantee names (x-memory-owner), the agent key acting for its owner (x-wallet-owner, put on the
  request by app/auth/middleware.py), and `Acting.reach` (the wallet and `Actor` a memory route
  works as); and the app-level guard that keeps both to the routes marked `acts_for_owner()`
  (app/http/markers.py).

Grants (app/grants/) and agent keys (app/agents/) keep only their own storage and rules.
"""
