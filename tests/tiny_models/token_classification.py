"""A tiny random-weight BIO NER model (BertForTokenClassification) with MiniLM's real tokenizer."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import Tokenizer

if TYPE_CHECKING:
    import transformers

    from sie.frontend.tokenize import Encoded
    from sie.gpu_proc.adapters.base import Adapter

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
MAX_SEQUENCE_LENGTH = 128
# Tilt of each label's logit over the centred scores: "O" wins about a third of the tokens, and
# I- tags win often enough that multi-token entities occur.
LABEL_TILT = [2.0, 0.0, 1.5, 0.0, 1.5]
CALIBRATION_TEXT = "John Smith lives in New York and works at Springfield Elementary School since 2004."


def make_token_classification(folder: Path, seed: int = 0) -> Path:
    """Write config, safetensors weights and MiniLM's tokenizer into `folder`; return it."""
    import torch
    import transformers

    from tests.integration.reference import minilm_dir

    config = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=MAX_SEQUENCE_LENGTH,
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
    )
    torch.manual_seed(seed)
    model = transformers.BertForTokenClassification(config).eval()
    source = minilm_dir()
    _spread_classifier(model, Tokenizer.from_file(str(source / "tokenizer.json")))
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, folder / name)
    return folder


def model_yaml_token_classification(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"extract": {}},
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "adapter": "token_classification",
    }


def _spread_classifier(model: transformers.BertForTokenClassification, tokenizer: Tokenizer) -> None:
    """Make the random head's argmaxes clear-cut and varied.

    The default init (std 0.02) gives near-equal logits, and one label wins almost every token
    because the encoder's token states share a large common direction. Wider weights spread the
    logits; biases cancel the common direction (measured on one sentence) and add `LABEL_TILT`.
    """
    import torch

    tokenizer.no_padding()  # MiniLM's tokenizer.json pads to 128
    ids = torch.tensor([tokenizer.encode(CALIBRATION_TEXT).ids])
    with torch.no_grad():
        common = model.bert(input_ids=ids).last_hidden_state[0].mean(0)
        weight = model.classifier.weight.normal_(0.0, 0.8)
        model.classifier.bias.copy_(torch.tensor(LABEL_TILT) - weight @ common)


def run_token_classification(adapter: Adapter, encoded: Encoded) -> list[np.ndarray]:
    """Each item's [len_i, num_labels] logits, the batch run as the device loop runs an extract op."""
    from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
    from sie.gpu_proc.runner import Runner
    from sie.shm.layout import Op, ResultKind, mask_of

    bounds = encoded.offsets.tolist()
    items = [
        PendingItem(0, 1, i, encoded.input_ids[start:end], None, 0.0, 0)
        for i, (start, end) in enumerate(itertools.pairwise(bounds))
    ]
    key = GroupKey(0, int(Op.EXTRACT), mask_of({ResultKind.TOKEN_SCORES}), 0, 0)
    batch = Batch(key, items, encoded.n_tokens, int(encoded.lengths.max()), 0.0)
    output = Runner(adapter.device).run(adapter, batch)[ResultKind.TOKEN_SCORES]
    assert output.row_offsets is not None
    rows = output.row_offsets.tolist()
    return [output.values[start:end] for start, end in itertools.pairwise(rows)]
