"""GLiNER bi-encoder zero-shot entity extraction: text and labels through separate encoders, the
label embeddings cached per label set."""

from sie.families.spec import Family

FAMILY = Family(
    name="gliner_bi",
    adapter="sie.gpu_proc.adapters.gliner_bi:GlinerBiAdapter",
    extract_runner="sie.frontend.tasks.extract_gliner_bi:run_gliner_bi",
    extract_needs_labels=True,
    text_tokenizer=False,
)
