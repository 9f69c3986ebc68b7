"""BGE-M3-style hybrid encoders: dense, sparse and multi-vector outputs from one encoder pass."""

from sie.families.spec import Family

FAMILY = Family(
    name="hybrid",
    adapter="sie.gpu_proc.adapters.hybrid:HybridAdapter",
    encodes=frozenset({"dense", "sparse", "multivector"}),
    score="maxsim",  # only when the model declares its multi-vector output
)
