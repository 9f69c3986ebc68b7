"""Tokenizers shipped only in slow form (no tokenizer.json), built offline, and a GLiNER using one.

- DeBERTa-v2 style: a sentencepiece unigram model trained here on a few thousand generated
  sentences, saved as spm.model with a tokenizer_config.json (what microsoft/deberta-v3-* ship).
- XLM-R style: the same kind of model saved as sentencepiece.bpe.model.
- BERT style: MiniLM's WordPiece vocab.txt with its tokenizer_config.json.
- A tiny random-weight GLiNER (DeBERTa-v2 encoder) whose folder holds the spm.model tokenizer with
  GLiNER's added marker tokens, and no tokenizer.json.
- A tiny random-weight GLiREL saved as glirel saves one (no tokenizer), its DeBERTa-v2 encoder a
  folder of its own with the spm.model tokenizer alone (published ones name microsoft/deberta-v3-large).
"""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path
from typing import Any

from tests.tiny_models.gliner import ENCODER, MAX_LEN, MAX_WIDTH, _spread_scores

SPM_VOCAB = 1000
# Words the sentencepiece model is trained on: generated syllable words, and real ones with accents,
# CJK, digits and punctuation, so its pieces include whole words, sub-words and single characters.
REAL_TEXT = (
    "John Smith lives in New York and works at Springfield Elementary School since 2004 . Paris "
    "France Berlin Apple Google café naïve résumé über Straße 東京 日本 北京 state-of-the-art e-mail "
    "Dr. O'Neil-Watts María Gómez São Paulo 3/4/2021 10:30 ! ? , ; : ( ) person location date"
)
DEBERTA_SPECIALS = {"pad": "[PAD]", "bos": "[CLS]", "eos": "[SEP]", "unk": "[UNK]"}
DEBERTA_CONFIG = {
    "tokenizer_class": "DebertaV2Tokenizer",
    "do_lower_case": False,
    "split_by_punct": False,
    "vocab_type": "spm",
    "model_max_length": 512,
    "bos_token": "[CLS]",
    "eos_token": "[SEP]",
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}
XLMR_CONFIG = {
    "tokenizer_class": "XLMRobertaTokenizer",
    "model_max_length": 512,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "sep_token": "</s>",
    "pad_token": "<pad>",
    "cls_token": "<s>",
    "mask_token": "<mask>",
}
BERT_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def training_sentences(n: int = 3000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in "aeiou"]
    made = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(400)]
    words = made + REAL_TEXT.split() * 8
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 15))) for _ in range(n)]


def train_spm(specials: dict[str, str] | None = None) -> bytes:
    """A small sentencepiece unigram model (NFKC normalization, sentencepiece's default)."""
    import sentencepiece as spm

    ids = {}
    for index, role in enumerate(("pad", "bos", "eos", "unk") if specials else ()):
        ids |= {f"{role}_id": index, f"{role}_piece": specials[role]}  # type: ignore[index]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_sentences()),
        model_writer=model,
        vocab_size=SPM_VOCAB,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=1,
        **ids,
    )
    return model.getvalue()


def make_deberta_spm(folder: Path) -> Path:
    """spm.model (ids: [PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3, as DeBERTa-v3's) and tokenizer_config.json."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spm.model").write_bytes(train_spm(DEBERTA_SPECIALS))
    (folder / "tokenizer_config.json").write_text(json.dumps(DEBERTA_CONFIG))
    return folder


def make_xlmr_spm(folder: Path) -> Path:
    """sentencepiece.bpe.model (sentencepiece's own ids: <unk> 0, <s> 1, </s> 2) and its config."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sentencepiece.bpe.model").write_bytes(train_spm())
    (folder / "tokenizer_config.json").write_text(json.dumps(XLMR_CONFIG))
    return folder


def make_bert_vocab(folder: Path) -> Path:
    """MiniLM's uncased WordPiece vocab.txt, tokenizer_config.json and special_tokens_map.json."""
    from tests.integration.reference import minilm_dir

    folder.mkdir(parents=True, exist_ok=True)
    for name in BERT_FILES:
        shutil.copy(minilm_dir() / name, folder / name)
    return folder


def make_gliner_spm(folder: Path, seed: int = 0) -> Path:
    """A tiny GLiNER (DeBERTa-v2 encoder) saved with its spm.model tokenizer and no tokenizer.json."""
    import torch
    from gliner import GLiNER, GLiNERConfig

    make_deberta_spm(folder)
    relative = {"relative_attention": True, "position_buckets": 32, "pos_att_type": ["p2c", "c2p"]}
    encoder = {"model_type": "deberta-v2", **ENCODER, **relative}
    encoder |= {"position_biased_input": False, "initializer_range": 0.3}
    config = GLiNERConfig(
        model_name=str(folder),  # the tokenizer's source; the encoder comes from encoder_config
        encoder_config=encoder,
        hidden_size=32,
        max_width=MAX_WIDTH,
        max_len=MAX_LEN,
        dropout=0.0,
        span_mode="markerV0",
    )
    torch.manual_seed(seed)
    model = GLiNER.from_config(config, backbone_from_pretrained=False, local_files_only=True)
    _spread_scores(model)
    model.save_pretrained(folder, safe_serialization=True)
    _keep_slow_form(folder)
    return folder


def _keep_slow_form(folder: Path) -> None:
    """Drop tokenizer.json, moving its added tokens (GLiNER's markers among them) into
    tokenizer_config.json's added_tokens_decoder, where a slow tokenizer's save keeps them."""
    saved = json.loads((folder / "tokenizer.json").read_text())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"] = {str(token.pop("id")): token for token in saved["added_tokens"]}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (folder / "tokenizer.json").unlink()
    assert (folder / "spm.model").is_file()


def make_glirel_spm(folder: Path, encoder: Path, seed: int = 0) -> Path:
    """GLiREL's glirel_config.json and pytorch_model.bin in `folder`, built on the DeBERTa-v2 encoder
    written to `encoder` (config, weights, spm.model); the config names `encoder` as model_name."""
    import torch
    import transformers
    from glirel import GLiREL
    from glirel.model import load_config_as_namespace

    from tests.tiny_models.glirel import BASE_CONFIG, _json, _spread_pairs

    make_deberta_spm(encoder)
    relative = {"relative_attention": True, "position_buckets": 32, "pos_att_type": ["p2c", "c2p"]}
    config = transformers.DebertaV2Config(
        **ENCODER, **relative, position_biased_input=False, initializer_range=0.3
    )
    torch.manual_seed(seed)
    transformers.AutoModel.from_config(config).save_pretrained(encoder)  # type: ignore[no-untyped-call]
    folder.mkdir(parents=True, exist_ok=True)
    settings = {**BASE_CONFIG, "model_name": str(encoder)}
    (folder / "glirel_config.json").write_text(_json(settings))
    torch.manual_seed(seed)
    model = GLiREL(load_config_as_namespace(folder / "glirel_config.json"))
    model.to("cpu")
    _spread_pairs(model)
    model.save_pretrained(folder, config=settings)
    return folder


def model_yaml_gliner_spm(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"extract": {}},
        "max_sequence_length": ENCODER["max_position_embeddings"],
        "adapter": "gliner",
    }
