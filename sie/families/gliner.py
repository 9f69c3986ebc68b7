"""GLiNER zero-shot entity extraction: span scores for the request's labels."""

from sie.families.spec import Family

FAMILY = Family(
    name="gliner",
    adapter="sie.gpu_proc.adapters.gliner:GlinerAdapter",
    extract_runner="sie.frontend.tasks.extract_text:run_gliner",
    extract_needs_labels=True,
)
