"""Qwen3-VL-Reranker: each (query, item) pair, text and images, as one chat prompt scored by yes/no."""

from sie.families.spec import Family

FAMILY = Family(
    name="qwen3_vl_reranker",
    adapter="sie.gpu_proc.adapters.qwen3_vl:Qwen3VLRerankerAdapter",
    inputs=("text", "image"),
    score="pairs",
    score_runner="sie.frontend.qwen3_vl_reranker:score",
    media_kind="own",  # each image resized to its own patch grid (sie.qwen3_vl),
    text_tokenizer=False,
)
