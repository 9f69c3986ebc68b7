"""Florence-2: one task prompt per image (OCR, captions, detection, grounding, DocVQA questions) ->
generated text parsed into entities or objects."""

from sie.families.spec import Family

FAMILY = Family(
    name="florence2",
    adapter="sie.gpu_proc.adapters.florence2:Florence2Adapter",
    inputs=("image",),
    media_kind="square",  # the processor's straight resize to its square, when its config names none
    extract_runner="sie.frontend.tasks.florence2:run_florence2",
    text_tokenizer=False,
)
