"""The padding-free forward equals the padded one, for the encoder alone and for every family on it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.packed import PackedEncoder, _groups
from sie.gpu_proc.adapters.packed_modernbert import PackedModernBert
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, mask_of
from tests.tiny_models.colbert import make_colbert, model_yaml_colbert
from tests.tiny_models.cross_encoder import make_cross_encoder, model_yaml_cross_encoder
from tests.tiny_models.hybrid import make_hybrid, model_yaml_hybrid
from tests.tiny_models.splade import make_splade, model_yaml_splade
from tests.tiny_models.token_classification import make_token_classification, model_yaml_token_classification

CPU = torch.device("cpu")
LENGTHS = [5, 17, 3, 100, 60, 61, 2, 30, 30, 31]


def padded_batch(
    vocab: int, pad: int, lengths: list[int], seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    ids = torch.full((len(lengths), max(lengths)), pad)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.from_numpy(rng.integers(5, vocab, n))
    return ids, (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()


# Mixed lengths take the grouped attention; one item, or equal lengths, the uniform path.
SHAPES = {"mixed": LENGTHS, "single": [7], "equal": [12, 12, 12]}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("arch", ["bert", "xlm-roberta"])
def test_packed_encoder_equals_padded_forward(arch: str, shape: str) -> None:
    lengths = SHAPES[shape]
    torch.manual_seed(0)
    common: dict[str, Any] = dict(
        vocab_size=300, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96
    )
    config = (
        transformers.BertConfig(**common, type_vocab_size=2)
        if arch == "bert"
        else transformers.XLMRobertaConfig(**common, type_vocab_size=1, pad_token_id=1)
    )
    model = transformers.AutoModel.from_config(config, attn_implementation="sdpa").eval()
    ids, mask = padded_batch(300, config.pad_token_id or 0, lengths)
    types = (torch.arange(ids.shape[1])[None, :] >= 4).long() * mask if arch == "bert" else None
    packed = PackedEncoder.wrap(model)
    assert packed is not None
    with torch.inference_mode():
        want = model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        got = packed.hidden_states(ids, lengths, types)
    real = mask.bool()
    cosine = torch.nn.functional.cosine_similarity(got[real], want[real], dim=-1)
    assert float(cosine.min()) >= 0.99999
    assert not got[~real].any()  # padding (if any) stays zero


def test_key_mask_hides_tokens_from_attention_only() -> None:
    torch.manual_seed(1)
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    model = transformers.AutoModel.from_config(config, attn_implementation="sdpa").eval()
    lengths = [12, 20, 7]
    ids, mask = padded_batch(100, 0, lengths, seed=3)
    keys = mask.clone()
    keys[0, 8:12] = 0  # ColBERT-style expansion tokens: computed, never attended to
    with torch.inference_mode():
        want = model(input_ids=ids, attention_mask=keys).last_hidden_state
        got = PackedEncoder.wrap(model).hidden_states(ids, lengths, key_mask=keys)  # type: ignore[union-attr]
    np.testing.assert_allclose(got[mask.bool()].numpy(), want[mask.bool()].numpy(), atol=1e-5)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_packed_modernbert_equals_padded_forward(shape: str) -> None:
    # A local window (8 either side) far shorter than the longest item, so the band mask binds;
    # ColBERT-style keys hidden from attention in one item.
    lengths = SHAPES[shape]
    torch.manual_seed(2)
    config = transformers.ModernBertConfig(
        vocab_size=300,
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=96,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        cls_token_id=1,
        sep_token_id=2,
        local_attention=16,
        layer_types=["full_attention", "sliding_attention", "sliding_attention"],
    )
    model = transformers.AutoModel.from_config(config, attn_implementation="sdpa").eval()
    ids, mask = padded_batch(300, 0, lengths, seed=5)
    keys = mask.clone()
    if shape == "mixed":
        keys[3, 90:100] = 0
    packed = PackedModernBert.wrap(model)
    assert packed is not None
    with torch.inference_mode():
        want = model(input_ids=ids, attention_mask=keys).last_hidden_state
        got = packed.hidden_states(ids, lengths, key_mask=keys if shape == "mixed" else None)
    real = mask.bool()
    np.testing.assert_allclose(got[real].numpy(), want[real].numpy(), atol=1e-5)
    assert not got[~real].any()


def test_unsupported_architectures_keep_the_padded_path() -> None:
    mpnet = transformers.AutoModel.from_config(
        transformers.MPNetConfig(
            vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=32
        )
    )
    assert PackedEncoder.wrap(mpnet) is None
    assert PackedEncoder.wrap(torch.nn.Linear(2, 2)) is None


def test_attention_groups_bound_their_padding() -> None:
    lengths = sorted([3, 3, 4, 10, 11, 12, 50, 52, 200, 201, 202])
    groups = _groups(lengths, 0.1, min_items=2)
    assert sorted(j for group in groups for j in group) == list(range(len(lengths)))
    assert len(groups) > 1
    for group in groups:
        real = sum(lengths[j] for j in group)
        # A group is within the bound, or became wasteful only by taking its last member while
        # still below the minimum size.
        within = real >= 0.9 * len(group) * max(lengths[j] for j in group)
        assert within or len(group) <= 2
    assert len(_groups(lengths, 0.1, min_items=len(lengths))) == 1


Family = tuple[Callable[[Path], Path], Callable[[str, Path], dict[str, Any]], ResultKind]
FAMILIES: dict[str, Family] = {
    "splade": (make_splade, model_yaml_splade, ResultKind.SPARSE),
    "colbert": (make_colbert, model_yaml_colbert, ResultKind.MULTIVECTOR),
    "hybrid": (make_hybrid, model_yaml_hybrid, ResultKind.DENSE),
    "cross_encoder": (make_cross_encoder, model_yaml_cross_encoder, ResultKind.SCORES),
    "token_classification": (
        make_token_classification,
        model_yaml_token_classification,
        ResultKind.TOKEN_SCORES,
    ),
}


def _run(adapter: Any, kinds: set[ResultKind], lengths: list[int], pad: int) -> dict[ResultKind, Any]:
    rng = np.random.default_rng(5)
    items = [
        np.concatenate([[101], rng.integers(1000, 2000, n - 2), [102]]).astype(np.int32) for n in lengths
    ]
    pending = [PendingItem(0, 1, i, ids, None, 0.0, 0) for i, ids in enumerate(items)]
    pending.sort(key=lambda item: len(item.input_ids))
    batch = Batch(GroupKey(0, int(Op.ENCODE), mask_of(kinds), 0, 0), pending, sum(lengths), max(lengths), 0.0)
    return Runner(CPU).run(adapter, batch)


@pytest.mark.parametrize("lengths", [[4, 9, 30, 31, 64, 5, 12], [16, 16, 16]], ids=["mixed", "equal"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_gives_the_same_results_packed_and_padded(
    family: str, lengths: list[int], tmp_path: Path
) -> None:
    make, describe, kind = FAMILIES[family]
    folder = make(tmp_path / family)
    adapter = load_adapter(parse_model_config(describe(f"tiny/{family}", folder)), folder, "cpu")
    assert adapter.is_padding_free  # type: ignore[attr-defined]
    packed = _run(adapter, {kind}, lengths, adapter.pad_token_id)[kind]
    adapter.is_padding_free = False  # type: ignore[attr-defined]
    for holder in (adapter, getattr(adapter, "_backend", None)):
        encoder = getattr(holder, "_encoder", None)
        if encoder is not None:
            encoder._packed = None
            holder.is_padding_free = False  # type: ignore[union-attr]
    padded = _run(adapter, {kind}, lengths, adapter.pad_token_id)[kind]
    if packed.row_offsets is not None:
        np.testing.assert_array_equal(packed.row_offsets, padded.row_offsets)
    if packed.indices is not None:  # sparse: the same terms, the same weights
        np.testing.assert_array_equal(packed.indices, padded.indices)
    np.testing.assert_allclose(packed.values, padded.values, atol=1e-5, rtol=1e-4)
    rows_a, rows_b = (
        packed.values.reshape(len(packed.values), -1),
        padded.values.reshape(len(padded.values), -1),
    )
    if rows_a.shape[1] > 1:
        cosine = (rows_a * rows_b).sum(1) / (np.linalg.norm(rows_a, axis=1) * np.linalg.norm(rows_b, axis=1))
        assert cosine.min() >= 0.99999
