"""GLiNER unions: several GLiNER span models read one text in word windows, their spans unioned."""

from sie.families.spec import Family

FAMILY = Family(
    name="gliner_union",
    adapter="sie.gpu_proc.adapters.gliner_union:GlinerUnionAdapter",
    extract_runner="sie.frontend.tasks.extract_gliner_union:run_gliner_union",
    companions="sie.gliner_union:member_repositories",
    text_tokenizer=False,
)
