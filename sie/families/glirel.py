"""GLiREL zero-shot relation extraction: the request's relation types between the entities it names."""

from sie.families.spec import Family

FAMILY = Family(
    name="glirel",
    adapter="sie.gpu_proc.adapters.glirel:GlirelAdapter",
    extract_runner="sie.frontend.tasks.extract_glirel:run_glirel",
    extract_needs_labels=True,
    tokenizer_from_encoder="glirel_config.json",
    text_tokenizer=False,
)
