"""A tiny random-weight GLiFormer (bidirectional Qwen3 backbone, NER head) with MiniLM's tokenizer.

Built from the `gliformer` package's own config classes and saved the way its checkpoints are
(gliner_config.json, the weights, the tokenizer with the package's added marker tokens).
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
EMBED_DIM = 24
MAX_LEN = 48  # tokens of prompt + text: small, so tests reach the package's cut
QWEN3: dict[str, Any] = {
    "vocab_size": 30522,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "intermediate_size": 64,
    "max_position_embeddings": 512,
    "relative_pos_encoding": "none",
    "initializer_range": 0.3,  # a wide init spreads the random head's scores over (0, 1)
}

CALIBRATION_TEXT = "John Smith lives in New York and works at Springfield Elementary School since 2004."
CALIBRATION_LABELS = ["person", "location", "organization", "date"]
CHANNEL_CENTRES = (-1.0, -1.0, -3.0)  # start, end, inside: spans of a few words pass 0.5


def make_gliformer(folder: Path, seed: int = 0) -> Path:
    """Write gliner_config.json, the weights and the tokenizer into `folder`; return it."""
    import torch
    from gliformer import GLiFormerConfig
    from transformers import Qwen3Config

    from tests.integration.reference import minilm_dir

    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, folder / name)
    config = GLiFormerConfig(
        model_name=str(folder),  # the tokenizer's source; the backbone comes from encoder_config
        encoder_config=Qwen3Config(**QWEN3).to_dict(),
        backbone_type="qwen3",
        hidden_size=32,
        max_len=MAX_LEN,
        dropout=0.0,
        ner_config={},
        embedding_config={"projection_dim": EMBED_DIM},
    )
    torch.manual_seed(seed)
    with warnings.catch_warnings():  # the package's own deprecation and init notices
        warnings.simplefilter("ignore")
        _build(config, folder)
    return folder


def _build(config: Any, folder: Path) -> None:
    import torch
    from gliformer import GLiFormer

    model = GLiFormer.load_from_config(config, backbone_from_pretrained=False, local_files_only=True)
    with torch.no_grad():  # the head's default init leaves every probability near 0.5
        for parameter in model.model.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, 0.3)
    _center_scores(model)
    model.save_pretrained(folder)


def _center_scores(model: Any) -> None:
    """Shift the head's (start, end, inside) logits so that each channel centres on INSIDE_SHIFT etc.

    Measured on one sentence: the random head puts `inside` far below 0, so no span would pass.
    """
    import torch

    captured: list[torch.Tensor] = []
    forward = model.model.forward

    def capture(*args: Any, **kwargs: Any) -> Any:
        output = forward(*args, **kwargs)
        captured.append(output.ner_logits)
        return output

    model.model.forward = capture
    model.inference([CALIBRATION_TEXT], entities=CALIBRATION_LABELS)
    del model.model.forward
    mean = captured[0].reshape(-1, 3).mean(0)
    out = model.model.heads.ner.scorer.out_mlp[-1]
    with torch.no_grad():
        out.bias.add_(torch.tensor(CHANNEL_CENTRES) - mean)


def model_yaml_gliformer(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"encode": {"dense": {"dim": EMBED_DIM}}, "extract": {}},
        "max_sequence_length": MAX_LEN,
        "adapter": "gliformer",
    }
