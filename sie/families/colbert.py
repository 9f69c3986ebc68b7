"""ColBERT late interaction: a vector per token, PyLate's tokenization, MaxSim scoring."""

from sie.families.spec import Family

FAMILY = Family(
    name="colbert",
    adapter="sie.gpu_proc.adapters.colbert:ColbertAdapter",
    encodes=frozenset({"multivector"}),
    score="maxsim",
    encode_tokenization="colbert",
)
