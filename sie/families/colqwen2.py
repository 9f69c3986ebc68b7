"""ColQwen2.5 visual-document retrieval (Qwen2.5-VL + a projection): page images and text queries as
token vectors, MaxSim scoring."""

from sie.families.spec import Family

FAMILY = Family(
    name="colqwen2",
    adapter="sie.gpu_proc.adapters.colqwen2:ColQwen2Adapter",
    inputs=("text", "image"),
    encodes=frozenset({"multivector"}),
    score="maxsim",
    encode_runner="sie.frontend.colqwen2:embed",
    # Unused: its pages are sized by its own recipe (sie.page_config), never by media_config.
    media_kind="own",  # each page resized to its own patch grid (sie.page_config)
    companions="sie.companions:lora_base_repository",
)
