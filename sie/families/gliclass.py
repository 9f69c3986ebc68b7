"""GLiClass zero-shot text classification: one forward scores every label of the request against a text."""

from sie.families.spec import Family

FAMILY = Family(
    name="gliclass",
    adapter="sie.gpu_proc.adapters.gliclass:GliclassAdapter",
    extract_runner="sie.frontend.tasks.extract_text:run_gliclass",
    extract_needs_labels=True,
)
