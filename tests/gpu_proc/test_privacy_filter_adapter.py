"""PrivacyFilterAdapter + Runner against transformers' OpenAIPrivacyFilterForTokenClassification:
each real token's label logits, whether the batch runs whole or in bounded row groups."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters import privacy_filter as privacy_filter_adapter
from sie.gpu_proc.adapters.privacy_filter import PrivacyFilterAdapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, mask_of
from tests.tiny_models.privacy_filter import _CORPUS, make_privacy_filter, model_yaml_privacy_filter

CPU = torch.device("cpu")
TEXTS = [*_CORPUS, "ok", " ".join(_CORPUS)]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_privacy_filter(tmp_path_factory.mktemp("privacy"), seed=3)


def token_batch(folder: Path, texts: list[str]) -> tuple[Batch, list[list[int]]]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = [encoding.ids for encoding in tokenizer.encode_batch(texts, add_special_tokens=False)]
    items = [PendingItem(0, 1, i, np.asarray(row, dtype=np.int32), None, 0.0, 0) for i, row in enumerate(ids)]
    key = GroupKey(0, int(Op.EXTRACT), mask_of({ResultKind.TOKEN_SCORES}), 0, 0)
    lengths = [len(row) for row in ids]
    return Batch(key, items, sum(lengths), max(lengths), 0.0), ids


def reference_logits(folder: Path, ids: list[list[int]]) -> list[np.ndarray]:
    import transformers

    model = transformers.AutoModelForTokenClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        return [model(input_ids=torch.tensor([row])).logits[0].numpy() for row in ids]


def load(folder: Path) -> PrivacyFilterAdapter:
    adapter = load_adapter(
        parse_model_config(model_yaml_privacy_filter("tiny/privacy", folder)), folder, "cpu"
    )
    assert isinstance(adapter, PrivacyFilterAdapter)
    return adapter


def run(folder: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    batch, ids = token_batch(folder, TEXTS)
    output = Runner(CPU).run(load(folder), batch)[ResultKind.TOKEN_SCORES]
    assert output.row_offsets is not None
    got = [output.values[output.row_offsets[i] : output.row_offsets[i + 1]] for i in range(len(TEXTS))]
    return got, reference_logits(folder, ids)


def test_logits_match_transformers_per_text(folder: Path) -> None:
    got, want = run(folder)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=1e-4)


def test_row_groups_give_the_same_logits(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A budget below one long row's scores: the batch runs one row at a time.
    monkeypatch.setattr(privacy_filter_adapter, "ATTENTION_ELEMENTS", 4 * 64 * 64)
    got, want = run(folder)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-4)


def test_heads_come_from_the_config(folder: Path) -> None:
    assert load(folder).heads == 4
