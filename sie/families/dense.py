"""Dense bi-encoders (BERT, RoBERTa/XLM-R, MPNet, ModernBERT, ...): one pooled vector per text."""

from sie.families.spec import Family

FAMILY = Family(
    name="dense",
    adapter="sie.gpu_proc.adapters.dense:DenseAdapter",
    encodes=frozenset({"dense"}),
)
