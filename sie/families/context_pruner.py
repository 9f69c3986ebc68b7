"""Context pruners: a cross-encoder's relevance score, and per-token keep scores over each passage
that the frontend turns into kept, highlighted and pruned character spans (sie.context_pruner)."""

from sie.families.spec import Family

FAMILY = Family(
    name="context_pruner",
    adapter="sie.gpu_proc.adapters.context_pruner:ContextPrunerAdapter",
    score="pairs",
    extract_runner="sie.frontend.tasks.extract_text:run_context_pruner",
    companions="sie.context_pruner:head_repository",
)
