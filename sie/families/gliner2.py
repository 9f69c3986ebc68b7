"""GLiNER2 schema extraction (fastino's gliner2 checkpoints): entities or a classification per
text, each read from one forward over the task's schema prompt and the text. Span checkpoints
(gliner2 1.x) serve every task; GLiNER2.5's boundary checkpoints serve entities."""

from sie.families.spec import Family

FAMILY = Family(
    name="gliner2",
    adapter="sie.gpu_proc.adapters.gliner2:Gliner2Adapter",
    extract_runner="sie.frontend.tasks.extract_gliner2:run_gliner2",
    # Labels may come from the profile (default_labels); the runner refuses a request left without.
    extract_needs_labels=False,
    text_tokenizer=False,  # rows are tokenized piece by piece with the folder's own tokenizer
)
