"""Qwen3-VL-Embedding: texts, images and both in one chat prompt, the last token's state as a vector."""

from sie.families.spec import Family

FAMILY = Family(
    name="qwen3_vl_embedding",
    adapter="sie.gpu_proc.adapters.qwen3_vl:Qwen3VLEmbeddingAdapter",
    inputs=("text", "image"),
    encodes=frozenset({"dense"}),
    encode_runner="sie.frontend.qwen3_vl_embedding:embed",
    media_kind="own",  # each image resized to its own patch grid (sie.qwen3_vl),
    text_tokenizer=False,
)
