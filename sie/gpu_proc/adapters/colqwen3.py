"""ColQwen3 (TomoroAI's retriever: Qwen3-VL + a projection): a page image or a text -> one unit vector
per token.

The Hub folder is the model's remote-code layout (config.json of `model_type: colqwen3`: Qwen3-VL's
`text_config` and `vision_config`, `embed_dim`; weights `vlm.model.*` and `embedding_proj_layer`,
or a bare Qwen3-VL's `model.*` and `custom_text_proj` in older checkpoints). What that code computes
is transformers' own `Qwen3VLModel` over the prompt, the last hidden states through the projection,
made unit length: so the backbone loads into that class from a Qwen3VLConfig built from the same
fields, and no code from the folder runs. Pages and queries arrive and run as ColQwen2.5's do
(sie.gpu_proc.adapters.colqwen2): the flat-patch cut and the Conv3d-as-matmul patch embedding are
the same for Qwen3-VL's 16-px patches.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.gpu_proc.adapters.colqwen2 import ColQwen2Adapter, patch_embed_as_matmul
from sie.gpu_proc.adapters.colvision import load_page_model
from sie.gpu_proc.adapters.common import compute_dtype, place
from sie.model_config import ModelConfigError
from sie.page_config import qwen_pages

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

# The remote code's names, and a bare Qwen3-VL's, -> Qwen3VLModel's (its lm_head is not loaded).
KEY_MAPPING = {
    r"^vlm\.model\.": "",
    r"^model\.": "",
}
PROJECTIONS = ("embedding_proj_layer", "custom_text_proj")
# The remote code's defaults for Qwen3-VL's special tokens, where config.json leaves them out.
_TOKEN_IDS = {
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
}


class ColQwen3Adapter(ColQwen2Adapter):
    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> ColQwen3Adapter:
        from transformers import Qwen3VLModel  # deferred: importing transformers is slow

        torch_device = torch.device(device)
        dtype = compute_dtype(torch_device, config.profile(profile).compute_precision)
        model, projection = load_page_model(
            Qwen3VLModel,
            "qwen3_vl",
            weights_dir,
            KEY_MAPPING,
            PROJECTIONS,
            dtype,
            config=qwen3_vl_config(weights_dir),
        )
        place(model, torch_device)
        patch_embed_as_matmul(model)
        normalizer = PixelNormalizer(qwen_pages(weights_dir).pixels, torch_device)
        budget = config.profile(profile).max_batch_tokens
        return cls(model, projection, normalizer, name=config.sie_id, max_batch_tokens=budget)


def qwen3_vl_config(weights_dir: Path) -> Any:
    """The Qwen3VLConfig the remote code builds from config.json (a bare Qwen3-VL's is read as is)."""
    from transformers import Qwen3VLConfig

    raw = json.loads((weights_dir / "config.json").read_text(encoding="utf-8"))
    model_type = raw.get("model_type")
    if model_type == "qwen3_vl":
        return Qwen3VLConfig.from_dict(raw)
    if model_type != "colqwen3" or not isinstance(raw.get("text_config"), dict):
        raise ModelConfigError(
            f"{weights_dir}: a {model_type} config.json, not ColQwen3's (colqwen3, with a text_config)"
        )
    text = raw["text_config"]
    return Qwen3VLConfig(
        text_config=text,
        vision_config=raw.get("vision_config"),
        tie_word_embeddings=bool(text.get("tie_word_embeddings", False)),
        **{key: int(raw.get(key, default)) for key, default in _TOKEN_IDS.items()},
    )
