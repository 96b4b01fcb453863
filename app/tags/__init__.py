"""GET /v1/tags: the tags a wallet uses, with how many live memories carry each."""
