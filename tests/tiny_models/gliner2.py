"""A tiny random-weight GLiNER2 (fastino's schema extractor) with MiniLM's real tokenizer, built offline.

The `gliner2` package (1.x) builds the Extractor from its config (encoder config inline, tokenizer
from the folder, so nothing is fetched) and saves it as the published checkpoints are laid out:
config.json, encoder_config/config.json, model.safetensors, and the tokenizer with GLiNER2's added
marker tokens ([P], [E], [L], ...).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
MAX_WIDTH = 4
# Words a text may have (SIE hands a GLiNER2 model its YAML's max_sequence_length as gliner2's
# max_len, in words): small enough that a window's row fits BERT's 512 absolute positions.
MAX_WORDS = 128
ENCODER: dict[str, Any] = {
    "vocab_size": 30522,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 512,
}
# Which count the random count head predicts: 0 would mean "nothing to extract" for every schema.
FAVOURED_COUNT = 2
# Span vectors are scaled so the random span scores spread over (0, 1) instead of sitting at 0.5.
SPAN_SCALE = 6.0
# The random classifier's logits hardly differ between labels; scaled, they spread.
CLASSIFIER_SCALE = 6.0


def make_gliner2(folder: Path, seed: int = 0) -> Path:
    """Write a saved GLiNER2 into `folder` and return it."""
    import contextlib
    import io

    import torch
    from gliner2 import GLiNER2
    from gliner2.model import ExtractorConfig
    from transformers import AutoTokenizer, BertConfig

    from tests.integration.reference import minilm_dir

    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, folder / name)
    config = ExtractorConfig(model_name=str(folder), max_width=MAX_WIDTH, counting_layer="count_lstm")
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    with contextlib.redirect_stdout(io.StringIO()):  # gliner2 prints its config banner
        model = GLiNER2(config, encoder_config=BertConfig(**ENCODER), tokenizer=tokenizer)
    _calibrate(model)
    model.save_pretrained(str(folder))
    model.processor.tokenizer.save_pretrained(str(folder))
    return folder


def model_yaml_gliner2(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"extract": {}},
        "max_sequence_length": MAX_WORDS,
        "adapter": "gliner2",
    }


def load_reference(folder: Path) -> Any:
    """The gliner2 package's own GLiNER2 on the saved weights (float32, CPU, eval)."""
    import contextlib
    import io

    from gliner2 import GLiNER2

    with contextlib.redirect_stdout(io.StringIO()):
        model = GLiNER2.from_pretrained(str(folder), map_location="cpu")
    return model.eval()


def _calibrate(model: Any) -> None:
    """Make the random heads say something: a count above 0, and span scores away from 0.5."""
    import torch

    with torch.no_grad():
        model.count_pred[-1].bias[FAVOURED_COUNT] += 10.0
        model.span_rep.span_rep_layer.out_project[-1].weight.mul_(SPAN_SCALE)
        model.classifier[-1].weight.mul_(CLASSIFIER_SCALE)


# GLiNER2.5's boundary network on a DeBERTa-v3-shaped encoder (relative positions only), small
# candidate sizes, records and relations off: an entity checkpoint as gliner2 2.x saves one.
BOUNDARY_ENCODER: dict[str, Any] = {
    **ENCODER,
    "relative_attention": True,
    "position_buckets": 256,
    "pos_att_type": ["p2c", "c2p"],
    "position_biased_input": False,
    "max_relative_positions": -1,
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "type_vocab_size": 0,
}
BOUNDARY_HEAD: dict[str, Any] = {
    "boundary_dim": 16,
    "pair_dim": 16,
    "multihead_pair_compat_heads": 4,
    "candidate_attention_heads": 4,
    "start_top_k": 8,
    "end_top_k": 8,
    "ends_per_start": 4,
    "starts_per_end": 4,
    "candidate_budget": 32,
    "training_candidate_budget": 40,
    "max_gold_per_query": 8,
    "boundary_top_k_max": 16,
    "pool_boundary_top_k": 16,
    "pool_size": 48,
    "min_pool_per_query": 4,
    "enable_records": False,
    "enable_relations": False,
}


def make_gliner2_boundary(
    folder: Path, seed: int = 0, *, encoder: dict[str, Any] | None = None, **head: Any
) -> Path:
    """Write a saved GLiNER2.5 boundary checkpoint into `folder` (gliner2 2.x); `encoder` overrides
    BOUNDARY_ENCODER's settings and `head` boundary_head's (candidate_pool, overlap_policy, ...)."""
    import torch
    from gliner2.configuration import ExtractorConfig
    from gliner2.inference.engine import BoundaryExtractor
    from transformers import AutoTokenizer, DebertaV2Config

    from tests.integration.reference import minilm_dir

    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, folder / name)
    settings = {**BOUNDARY_HEAD, **head}
    config = ExtractorConfig(
        model_name=str(folder), architecture="boundary", token_pooling="first", boundary_head=settings
    )
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = BoundaryExtractor(
        config, encoder_config=DebertaV2Config(**{**BOUNDARY_ENCODER, **(encoder or {})}), tokenizer=tokenizer
    )
    with torch.no_grad():  # spread the random pair scores so that some clear a threshold
        boundary = model.boundary_head
        if settings.get("candidate_pool") == "shared":
            boundary.shared_pool_scorer.film_output[-1].bias.fill_(0.6)
        else:
            boundary.pair_scorer.length_query_projection.bias.fill_(0.6)
        model.classifier[-1].weight.mul_(CLASSIFIER_SCALE)  # and the label logits
    model.save_pretrained(str(folder))
    return folder


# GLiNER2.5-Decide's checkpoints are gliner2 2.x span or boundary checkpoints read through their
# classifier head; a small window in tokens, so that documents are cut.
DECIDE_WINDOW = 192


def make_gliner2_decide(folder: Path) -> Path:
    return make_gliner2(folder, seed=3)


def make_gliner2_decide_boundary(folder: Path) -> Path:
    # Absolute positions added to the input: a random encoder of relative positions only gives
    # every [L] marker nearly the same state, and every label the same logit.
    return make_gliner2_boundary(folder, seed=4, encoder={"position_biased_input": True})


def model_yaml_gliner2_decide(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"extract": {}},
        "max_sequence_length": DECIDE_WINDOW,
        "adapter": "gliner2_decide",
    }


def load_boundary_reference(folder: Path) -> Any:
    """gliner2 2.x's own extractor on the saved boundary weights (float32, CPU, eval)."""
    from gliner2 import AutoExtractor

    return AutoExtractor.from_pretrained(str(folder), map_location="cpu").eval()
