"""Donut OCR-free document understanding: a page image (and a DocVQA question) -> generated
tokens -> JSON fields, returned as entities (one per leaf field) as SIE returns them."""

from sie.families.spec import Family

FAMILY = Family(
    name="donut",
    adapter="sie.gpu_proc.adapters.donut:DonutAdapter",
    inputs=("image",),
    extract_runner="sie.frontend.tasks.donut:run_donut",
    media_kind="own",  # pages resized and padded as Donut's processor does (sie.frontend.media.donut),
    text_tokenizer=False,
)
