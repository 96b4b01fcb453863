"""Development tools, off the production path: a local anvil chain with a dev USDC (the payment
tests and `engram serve --dev-chain`), the demo wallet and an example paying agent.

They need the `dev` extra (`pip install 'engram-x402[dev]'`: vyper compiles the token) and anvil
from npm (the project's package.json). Nothing in app/ imports this package but app/cli/serve.py,
for `--dev-chain`, so a production install runs without them.
"""
