"""The HTTP frontend process: ASGI app, request decoding, tokenization, response rendering."""
