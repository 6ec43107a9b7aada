"""`nnlm serve`: models behind a local HTTP server (JSON API, request batching) with a page to explore them."""
