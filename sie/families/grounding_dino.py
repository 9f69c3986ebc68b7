"""Grounding DINO open-set detection: boxes in an image for the request's labels, as one prompt."""

from sie.families.spec import Family

FAMILY = Family(
    name="grounding_dino",
    adapter="sie.gpu_proc.adapters.grounding_dino:GroundingDinoAdapter",
    inputs=("image",),
    extract_runner="sie.frontend.tasks.ground:run_grounding_dino",
    extract_needs_labels=True,
    media_kind="detr",
    text_tokenizer=False,
)
