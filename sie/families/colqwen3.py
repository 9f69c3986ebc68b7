"""ColQwen3 visual-document retrieval (TomoroAI's, Qwen3-VL + a projection): page images and texts as
token vectors, MaxSim scoring."""

from sie.families.spec import Family

FAMILY = Family(
    name="colqwen3",
    adapter="sie.gpu_proc.adapters.colqwen3:ColQwen3Adapter",
    inputs=("text", "image"),
    encodes=frozenset({"multivector"}),
    score="maxsim",
    encode_runner="sie.frontend.colqwen3:embed",
    media_kind="own",  # each page resized to its own patch grid, at its profile's token cap
    companions="sie.companions:lora_base_repository",
)
