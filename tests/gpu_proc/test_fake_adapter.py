"""SIE's fake model on the device: outputs a function of each item alone, shapes as declared, and
its faults raising what the real code paths expect (an allocator's out-of-memory, a slow load)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from sie.frontend.code_points import CodePointTokenizer
from sie.gpu_proc.adapters.base import load_adapter
from sie.gpu_proc.adapters.fake import FakeAdapter
from sie.gpu_proc.adapters.fake_faults import FAULTS_ENV, resolve_faults
from sie.gpu_proc.outputs import Output
from sie.gpu_proc.recovery import is_out_of_memory
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, TokenBatch, mask_of
from tests.tiny_models.fake import model_yaml_fake

from .device_path import device_run

ALL = {ResultKind.DENSE, ResultKind.SPARSE, ResultKind.MULTIVECTOR}
TEXTS = ["hello world", "", "a", "héllo  wörld\tthree", "hello world ", "x" * 200, "日本語 テキスト"]


def fake(**loadtime: object) -> FakeAdapter:
    adapter = load_adapter(parse_model_config(model_yaml_fake("tiny/fake", **loadtime)), Path(), "cpu")
    assert isinstance(adapter, FakeAdapter)
    return adapter


def encode(adapter: FakeAdapter, texts: list[str], kinds: set[ResultKind] = ALL) -> dict[ResultKind, Output]:
    encoded = CodePointTokenizer(64).encode(texts)
    request = TokenBatch(1, Op.ENCODE, 0, encoded.offsets, encoded.input_ids, output_mask=mask_of(kinds))
    return device_run(adapter, request)


def rows(output: Output, i: int) -> np.ndarray:
    assert output.row_offsets is not None
    return output.values[output.row_offsets[i] : output.row_offsets[i + 1]]


def test_outputs_depend_on_the_item_alone_whatever_its_batch() -> None:
    adapter = fake()
    together = encode(adapter, TEXTS)
    for i, text in enumerate(TEXTS):
        alone = encode(adapter, [text])
        np.testing.assert_array_equal(alone[ResultKind.DENSE].values[0], together[ResultKind.DENSE].values[i])
        for kind in (ResultKind.SPARSE, ResultKind.MULTIVECTOR):
            np.testing.assert_array_equal(rows(alone[kind], 0), rows(together[kind], i))
    again = encode(fake(), TEXTS)  # another instance, the same values
    np.testing.assert_array_equal(again[ResultKind.DENSE].values, together[ResultKind.DENSE].values)


def test_dense_vectors_are_distinct_unit_vectors_of_the_declared_dim() -> None:
    dense = encode(fake(), TEXTS)[ResultKind.DENSE].values
    assert dense.shape == (len(TEXTS), 16) and dense.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(dense, axis=1), 1.0, rtol=1e-6)
    assert len({row.tobytes() for row in dense}) == len(TEXTS)  # a trailing space is another input


def test_sparse_terms_are_ascending_distinct_in_range_and_positive() -> None:
    sparse = encode(fake(), TEXTS, {ResultKind.SPARSE})[ResultKind.SPARSE]
    assert sparse.indices is not None and sparse.row_offsets is not None
    for i in range(len(TEXTS)):
        start, end = sparse.row_offsets[i], sparse.row_offsets[i + 1]
        terms = sparse.indices[start:end]
        assert 1 <= len(terms) <= 8 and (np.diff(terms) > 0).all() and (terms < 1000).all()
        assert (sparse.values[start:end] > 0).all()


def test_one_unit_vector_per_word_and_at_least_one() -> None:
    vectors = encode(fake(), TEXTS, {ResultKind.MULTIVECTOR})[ResultKind.MULTIVECTOR]
    counts = np.diff(vectors.row_offsets).tolist()  # type: ignore[arg-type]
    assert counts == [max(1, len(text[:64].split())) for text in TEXTS]
    assert vectors.values.shape[1] == 8
    np.testing.assert_allclose(np.linalg.norm(vectors.values, axis=1), 1.0, rtol=1e-6)


def test_pair_scores_lie_in_the_unit_interval_and_follow_the_pair() -> None:
    adapter = fake()
    tokenizer = CodePointTokenizer(64)
    queries, docs = ["q", "q", "qd", "q"], ["d", "e", "", "d"]
    encoded = tokenizer.encode_pairs(queries, docs)
    request = TokenBatch(
        1,
        Op.SCORE,
        0,
        encoded.offsets,
        encoded.input_ids,
        encoded.token_type_ids,
        output_mask=mask_of({ResultKind.SCORES}),
    )
    scores = device_run(adapter, request)[ResultKind.SCORES].values[:, 0]
    assert ((scores >= 0) & (scores < 1)).all()
    assert scores[0] == scores[3] and len(set(scores[:3].tolist())) == 3  # ("qd", "") is not ("q", "d")


def test_the_declared_footprint_is_held_until_close() -> None:
    adapter = fake(memory_footprint_bytes=3 << 20)
    assert (
        adapter.memory_bytes() == 3 << 20 and adapter._held is not None and adapter._held.numel() == 3 << 20
    )
    adapter.close()
    assert adapter._held is None
    with pytest.raises(RuntimeError, match="closed"):
        encode(adapter, ["a"])


def test_the_nth_forward_fails_to_allocate_like_a_real_oom() -> None:
    adapter = fake(faults={"oom_on_dispatch": 2, "oom_repeat": 2})
    encode(adapter, ["a"])
    for _ in range(2):
        with pytest.raises(RuntimeError) as caught:
            encode(adapter, ["a"])
        assert is_out_of_memory(caught.value) and "can't allocate memory" in str(caught.value)
    encode(adapter, ["a"])  # the window has passed


def test_a_forward_over_the_token_limit_fails_to_allocate() -> None:
    adapter = fake(faults={"oom_over_tokens": 10})
    encode(adapter, ["0123456789", ""])  # 10 tokens: fits
    with pytest.raises(RuntimeError) as caught:
        encode(adapter, ["0123456", "abcd"])  # 11 tokens together
    assert is_out_of_memory(caught.value)


def test_load_faults_hold_or_fail_the_load(tmp_path: Path) -> None:
    started = time.monotonic()
    fake(faults={"slow_load_s": 0.2})
    assert time.monotonic() - started >= 0.2
    with pytest.raises(RuntimeError, match="injected load failure"):
        fake(faults={"fail_load": True})
    with pytest.raises(TimeoutError, match="latch"):
        fake(faults={"load_latch_file": str(tmp_path / "never"), "latch_timeout_s": 0.05})


def test_the_environment_adds_faults_by_fault_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAULTS_ENV, json.dumps({"k": {"oom_on_dispatch": 1}, "other": {"fail_load": True}}))
    assert resolve_faults({"slow_load_s": 1.0}, "k").oom_on_dispatch == 1
    assert resolve_faults({"slow_load_s": 1.0}, "k").slow_load_s == 1.0
    assert not resolve_faults(None, "unnamed").fail_load
    monkeypatch.setenv(FAULTS_ENV, "{not json")
    with pytest.raises(ValueError, match="invalid SIE_FAKE_FAULTS"):
        resolve_faults(None, "k")


@pytest.mark.parametrize(
    ("faults", "message"),
    [
        ({"no_such_fault": 1}, "unknown fake fault"),
        ({"oom_on_dispatch": 0}, "oom_on_dispatch"),
        ({"slow_load_s": float("nan")}, "slow_load_s"),
        ({"latch_timeout_s": 0}, "latch_timeout_s"),
    ],
)
def test_bad_faults_fail_the_load_by_name(faults: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_faults(faults, "k")


def test_kinds_follow_the_declared_outputs() -> None:
    only_dense = parse_model_config(
        {"sie_id": "d", "tasks": {"encode": {"dense": {"dim": 4}}}, "adapter": "fake"}
    )
    adapter = load_adapter(only_dense, Path(), "cpu")
    assert adapter.kinds == {ResultKind.DENSE, ResultKind.SCORES}
    assert adapter.device == torch.device("cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_same_outputs_and_a_cuda_out_of_memory() -> None:
    config = parse_model_config(model_yaml_fake("tiny/fake", faults={"oom_over_tokens": 10}))
    adapter = load_adapter(config, Path(), "cuda")
    assert isinstance(adapter, FakeAdapter) and adapter._held is not None and adapter._held.is_cuda
    np.testing.assert_array_equal(
        encode(adapter, ["abc"])[ResultKind.DENSE].values, encode(fake(), ["abc"])[ResultKind.DENSE].values
    )
    with pytest.raises(torch.OutOfMemoryError) as caught:
        encode(adapter, ["x" * 11])
    assert is_out_of_memory(caught.value)
