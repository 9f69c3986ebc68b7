"""Cross-encoder rerankers: each (query, item) pair read in one forward, a relevance logit out."""

from sie.families.spec import Family

FAMILY = Family(
    name="cross_encoder",
    adapter="sie.gpu_proc.adapters.cross_encoder:CrossEncoderAdapter",
    score="pairs",
)
