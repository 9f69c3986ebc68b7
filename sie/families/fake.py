"""SIE's fake engine (`sie-fake`): no weights and no forward, outputs hashed from the token ids.

It serves every surface a text model has here (dense, sparse and multi-vector encode, pair
scores) at the cost of a hash, so the serving stack shows without a model in the way, and its
profiles inject faults (slow loads, out-of-memory forwards) through the real code paths.
"""

from sie.families.spec import Family

FAMILY = Family(
    name="fake",
    adapter="sie.gpu_proc.adapters.fake:FakeAdapter",
    encodes=frozenset({"dense", "sparse", "multivector"}),
    score="pairs",
    weightless=True,
    profile_variants=True,
)
