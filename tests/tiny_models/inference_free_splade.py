"""A tiny inference-free sparse encoder, laid out as OpenSearch's `doc-*` checkpoints are.

The tiny SPLADE masked LM (tests.tiny_models.splade) plus a fabricated `idf.json` and the
sentence-transformers SpladePooling config of the Router's document route. `reference_encoder`
builds the published recipe on the same files: a Router whose query route is SparseStaticEmbedding
(IDF lookup) and whose document route is MLMTransformer + SpladePooling.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.tiny_models.splade import (
    LOGIT_SHIFT,
    MAX_SEQUENCE_LENGTH,
    TOKENIZER_FILES,
    VOCAB_SIZE,
    make_splade,
    model_yaml_splade,
)

if TYPE_CHECKING:
    from sentence_transformers import SparseEncoder

IDF_TOKENS = 12000  # the first this many vocabulary entries get a weight; the rest are left out
POOLING_FOLDER = "document_1_SpladePooling"


def make_inference_free_splade(
    folder: Path, activation: str = "log1p_relu", *, is_distilbert: bool = False, seed: int = 0
) -> Path:
    """The tiny masked LM (BERT, or DistilBERT as doc-v2-distill and doc-v3-distill are), an idf.json
    and the document route's pooling config in `folder`."""
    from sentence_transformers.sparse_encoder.modules import SpladePooling
    from tokenizers import Tokenizer

    if is_distilbert:
        _make_distilbert(folder, seed)
    else:
        make_splade(folder, seed=seed)
    vocab = Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab()
    # Weights from 0 to 6, some exactly 0 (tokens that are no query term), special tokens included.
    idf = {
        token: round((token_id * 7919) % 601 / 100, 2)
        for token, token_id in vocab.items()
        if token_id < IDF_TOKENS
    }
    idf["[CLS]"], idf["[SEP]"] = 0.25, 0.5
    (folder / "idf.json").write_text(json.dumps(idf), encoding="utf-8")
    (folder / POOLING_FOLDER).mkdir()
    SpladePooling("max", activation_function=activation).save(str(folder / POOLING_FOLDER))  # type: ignore[arg-type]
    return folder


def _make_distilbert(folder: Path, seed: int) -> None:
    import torch
    import transformers

    from tests.integration.reference import minilm_dir

    config = transformers.DistilBertConfig(
        vocab_size=VOCAB_SIZE,
        dim=32,
        n_layers=2,
        n_heads=4,
        hidden_dim=64,
        max_position_embeddings=MAX_SEQUENCE_LENGTH,
    )
    torch.manual_seed(seed)
    model = transformers.DistilBertForMaskedLM(config).eval()
    with torch.no_grad():
        model.vocab_projector.bias.fill_(LOGIT_SHIFT)  # a few hundred terms per text, as in make_splade
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, folder / name)


def model_yaml_inference_free_splade(sie_id: str, folder: Path) -> dict[str, Any]:
    return model_yaml_splade(sie_id, folder)


def reference_encoder(folder: Path) -> SparseEncoder:
    """sentence-transformers' inference-free SparseEncoder on the folder's weights, on CPU."""
    import transformers
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Router
    from sentence_transformers.sparse_encoder.modules import (
        MLMTransformer,
        SparseStaticEmbedding,
        SpladePooling,
    )

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    query = SparseStaticEmbedding.from_json(str(folder / "idf.json"), tokenizer=tokenizer, frozen=True)
    pooling = json.loads((folder / POOLING_FOLDER / "config.json").read_text(encoding="utf-8"))
    document = [
        MLMTransformer(str(folder)),
        SpladePooling("max", activation_function=pooling["activation_function"]),
    ]
    router = Router.for_query_document(query_modules=[query], document_modules=document)
    return SparseEncoder(modules=[router], device="cpu")
