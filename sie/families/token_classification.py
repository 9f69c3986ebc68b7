"""Token classification (NER taggers): per-token logits, merged into character spans by the frontend."""

from sie.families.spec import Family

FAMILY = Family(
    name="token_classification",
    adapter="sie.gpu_proc.adapters.token_classification:TokenClassificationAdapter",
    extract_runner="sie.frontend.tasks.extract_text:run_token_classification",
)
