"""GLiNER2.5-Decide typed decisions (fastino's gliner2 2.x classifiers): Laya's typed questions,
GLiClass's label groups or plain labels, every task of a request scored in one row per item."""

from sie.families.spec import Family

FAMILY = Family(
    name="gliner2_decide",
    adapter="sie.gpu_proc.adapters.gliner2_decide:Gliner2DecideAdapter",
    extract_runner="sie.frontend.tasks.extract_gliner2_decide:run_gliner2_decide",
    extract_needs_labels=False,  # questions or label groups may stand in for labels
    state_items=True,  # an item may be a Laya state (metadata.state) instead of text
    text_tokenizer=False,  # rows are tokenized piece by piece with the folder's own tokenizer
)
