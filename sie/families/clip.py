"""CLIP-style dual encoders: texts and images embedded into one dense space."""

from sie.families.spec import Family

FAMILY = Family(
    name="clip",
    adapter="sie.gpu_proc.adapters.clip:ClipAdapter",
    inputs=("text", "image"),
    encodes=frozenset({"dense"}),
    media_kind="crop",
)
