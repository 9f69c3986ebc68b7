"""ColSmol visual-document retrieval (SmolVLM, an Idefics3, + a projection): page images and text
queries as token vectors, MaxSim scoring."""

from sie.families.spec import Family

FAMILY = Family(
    name="colsmol",
    adapter="sie.gpu_proc.adapters.colsmol:ColSmolAdapter",
    inputs=("text", "image"),
    encodes=frozenset({"multivector"}),
    score="maxsim",
    encode_runner="sie.frontend.colsmol:embed",
    # Unused: its pages are sized by its own recipe (sie.page_config), never by media_config.
    media_kind="own",  # pages cut into tiles plus a global view (sie.page_config)
    companions="sie.companions:lora_base_repository",
)
