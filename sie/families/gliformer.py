"""GLiFormer multi-task models: zero-shot entities over the request's labels, and text embeddings."""

from sie.families.spec import Family

FAMILY = Family(
    name="gliformer",
    adapter="sie.gpu_proc.adapters.gliformer:GliformerAdapter",
    extract_runner="sie.frontend.tasks.extract_gliformer:run_gliformer",
    extract_needs_labels=True,
    encodes=frozenset({"dense"}),
)
