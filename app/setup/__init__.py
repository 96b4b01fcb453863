"""`engram setup`: from nothing to an agent with memory (wallet, server, clients' configs)."""
