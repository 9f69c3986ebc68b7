"""Tiny random-weight cross-encoders (sequence classifiers) with MiniLM's real WordPiece tokenizer.

Three architectures share the vocabulary (30522) so real text tokenizes:
- "bert": BertForSequenceClassification, MiniLM's tokenizer as is (pair token types 0/1).
- "xlmr": XLMRobertaForSequenceClassification with the RoBERTa quirks: one token type, padding id 1
  (positions count from it) and the `<s> A </s></s> B </s>` pair layout, all types 0. MiniLM's
  vocabulary is rewritten for it ([PAD] and [unused0] swap ids, so [PAD] is 1).
- "modernbert": ModernBertForSequenceClassification (no token types), MiniLM's special tokens.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from sie.gpu_proc.batcher import Batch

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
VOCAB_SIZE = 30522
# As long as the sequences TextTokenizer keeps by default, so no test pair overflows the positions.
MAX_SEQUENCE_LENGTH = 512
ARCHS = ("bert", "xlmr", "modernbert")
PAD, UNUSED0, CLS, SEP = 0, 1, 101, 102
TINY: dict[str, Any] = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": MAX_SEQUENCE_LENGTH,
    # Wider than the usual 0.02 so the [CLS] state, and so the scores, depend clearly on the text.
    "initializer_range": 0.2,
}


def make_cross_encoder(
    folder: Path, seed: int = 0, *, num_labels: int = 1, arch: str = "bert", **labels: Any
) -> Path:
    """Write config, safetensors weights and a tokenizer into `folder`; return it."""
    import torch
    import transformers

    config = classifier_config(arch, num_labels, **labels)
    torch.manual_seed(seed)
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    write_tokenizer(folder, arch)
    return folder


def model_yaml_cross_encoder(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"score": {}},
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "adapter": "cross_encoder",
    }


def pairs_batch(
    folder: Path,
    queries: list[str],
    docs: list[str],
    max_length: int = MAX_SEQUENCE_LENGTH,
    *,
    extract: bool = False,
) -> Batch:
    """A device batch of (query, doc) pairs as the frontend sends it: encode_pairs, one item a pair;
    `extract` asks for what a context pruner's extract asks (scores and per-token scores)."""
    from sie.frontend.tokenize import TextTokenizer
    from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
    from sie.shm.layout import Op, ResultKind, mask_of

    encoded = TextTokenizer(folder / "tokenizer.json", max_length).encode_pairs(queries, docs)
    items = []
    for i in range(len(queries)):
        span = slice(int(encoded.offsets[i]), int(encoded.offsets[i + 1]))
        types = None if encoded.token_type_ids is None else encoded.token_type_ids[span]
        items.append(PendingItem(0, 1, i, encoded.input_ids[span], types, 0.0, 0))
    lengths = [len(item.input_ids) for item in items]
    kinds = {ResultKind.SCORES, ResultKind.TOKEN_SCORES} if extract else {ResultKind.SCORES}
    key = GroupKey(0, int(Op.EXTRACT if extract else Op.SCORE), mask_of(kinds), 0, 0)
    return Batch(key, items, sum(lengths), max(lengths), 0.0)


def classifier_config(arch: str, num_labels: int, **labels: Any) -> PretrainedConfig:
    """A tiny sequence-classification config; `labels` may give id2label/label2id."""
    import transformers

    if not labels:
        labels = {"num_labels": num_labels}
    if arch == "bert":
        return transformers.BertConfig(**TINY, **labels)
    if arch == "xlmr":
        return transformers.XLMRobertaConfig(
            **TINY, **labels, type_vocab_size=1, pad_token_id=UNUSED0, bos_token_id=CLS, eos_token_id=SEP
        )
    if arch == "modernbert":
        special = {"pad_token_id": PAD, "bos_token_id": CLS, "eos_token_id": SEP}
        return transformers.ModernBertConfig(
            **TINY, **labels, **special, cls_token_id=CLS, sep_token_id=SEP, local_attention=16
        )
    raise ValueError(arch)


def write_tokenizer(folder: Path, arch: str) -> None:
    from tests.integration.reference import minilm_dir

    source = minilm_dir()
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, folder / name)
    if arch == "xlmr":
        _roberta_style(folder)
    if arch == "modernbert":
        _edit_json(folder / "tokenizer_config.json", _without_token_types)


def _roberta_style(folder: Path) -> None:
    """MiniLM's tokenizer with [PAD] at id 1 and RoBERTa's pair layout, loaded as tokenizer.json says."""

    def edit_tokenizer(data: dict[str, Any]) -> None:
        vocab = data["model"]["vocab"]
        vocab["[PAD]"], vocab["[unused0]"] = UNUSED0, PAD
        for token in data["added_tokens"]:
            if token["content"] == "[PAD]":
                token["id"] = UNUSED0
        data["padding"] = data["truncation"] = None
        data["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [_special("[CLS]"), _sequence("A"), _special("[SEP]")],
            "pair": [
                *(_special("[CLS]"), _sequence("A"), _special("[SEP]")),
                *(_special("[SEP]"), _sequence("B"), _special("[SEP]")),
            ],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [CLS], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [SEP], "tokens": ["[SEP]"]},
            },
        }

    _edit_json(folder / "tokenizer.json", edit_tokenizer)
    # The generic class keeps tokenizer.json whole (BertTokenizer would rebuild BERT's pair layout).
    _edit_json(folder / "tokenizer_config.json", _generic_class)
    lines = (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")
    lines[PAD], lines[UNUSED0] = lines[UNUSED0], lines[PAD]
    (folder / "vocab.txt").write_text("\n".join(lines), encoding="utf-8")


def _special(token: str) -> dict[str, Any]:
    return {"SpecialToken": {"id": token, "type_id": 0}}


def _sequence(name: str) -> dict[str, Any]:
    return {"Sequence": {"id": name, "type_id": 0}}


def _generic_class(data: dict[str, Any]) -> None:
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    data["model_input_names"] = ["input_ids", "attention_mask"]


def _without_token_types(data: dict[str, Any]) -> None:
    data["model_input_names"] = ["input_ids", "attention_mask"]


def _edit_json(path: Path, edit: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
