"""NLI zero-shot classification: each (text, "This example is {label}.") pair through an NLI model."""

from sie.families.spec import Family

FAMILY = Family(
    name="nli_zero_shot",
    # The same forward as a cross-encoder (logits per text pair); only the frontend's prompts and
    # the reading of the logits differ.
    adapter="sie.gpu_proc.adapters.cross_encoder:CrossEncoderAdapter",
    extract_runner="sie.frontend.tasks.extract_text:run_nli_zero_shot",
    extract_needs_labels=True,
)
