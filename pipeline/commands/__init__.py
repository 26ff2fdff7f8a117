"""One module per CLI command; each defines ``command`` (a click command). cli.py finds them."""
