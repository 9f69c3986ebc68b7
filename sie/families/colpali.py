"""ColPali visual-document retrieval: page images and text queries as token vectors, MaxSim scoring."""

from sie.families.spec import Family

FAMILY = Family(
    name="colpali",
    adapter="sie.gpu_proc.adapters.colpali:ColPaliAdapter",
    inputs=("text", "image"),
    encodes=frozenset({"multivector"}),
    score="maxsim",
    encode_runner="sie.frontend.colpali:embed",
    media_kind="square",  # SiglipImageProcessor: a fixed 448-px resize, no crop
)
