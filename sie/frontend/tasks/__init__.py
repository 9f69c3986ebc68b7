"""One pipeline per task (encode, score, extract), shared by every model family and transport."""
