"""LightOnOCR-3: a page image -> its Markdown transcription (or its layout blocks, grounded),
sampled from a vision-language model."""

from sie.families.spec import Family

FAMILY = Family(
    name="lighton_ocr3",
    adapter="sie.gpu_proc.adapters.lighton_ocr3:LightOnOcr3Adapter",
    inputs=("image",),
    media_kind="own",  # each page resized at its own aspect (sie.page_config.GridPages)
    extract_runner="sie.frontend.tasks.page_ocr:run_lighton_ocr3",
    text_tokenizer=False,
)
