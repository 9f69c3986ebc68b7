"""WhisperAdapter through the device path against `WhisperForConditionalGeneration.generate`.

The reference is what a user of transformers writes: the feature extractor on the same samples
(with its attention mask), then `generate` with the same options. Token ids must be equal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.whisper import WhisperAdapter
from sie.gpu_proc.outputs import Output
from sie.model_config import parse_model_config
from sie.shm.layout import Op, OutputMask, ResultKind, TokenBatch
from tests.gpu_proc.device_path import device_run
from tests.media_samples import tone
from tests.tiny_models.whisper import make_whisper, model_yaml_whisper

RATE = 16000
NOISE = (np.random.default_rng(0).standard_normal(RATE * 20) * 0.3).astype(np.float32)
CLIPS = [tone(3.0, RATE), tone(7.5, RATE, 300.0), NOISE]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_whisper(tmp_path_factory.mktemp("whisper"))


@pytest.fixture(scope="module")
def adapter(folder: Path) -> WhisperAdapter:
    loaded = load_adapter(parse_model_config(model_yaml_whisper("tiny/whisper", folder)), folder, "cpu")
    assert isinstance(loaded, WhisperAdapter)
    return loaded


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    import transformers

    return (
        transformers.WhisperForConditionalGeneration.from_pretrained(folder).eval(),
        transformers.WhisperFeatureExtractor.from_pretrained(folder),
        transformers.AutoTokenizer.from_pretrained(folder),
    )


def ids(reference: Any, *tokens: str) -> list[int]:
    return [int(reference[2].convert_tokens_to_ids(token)) for token in tokens]


def request(clips: list[np.ndarray], prompt: list[int], mask: int, temperature: float = 0.0) -> TokenBatch:
    n = len(clips)
    sample_offsets = np.concatenate([[0], np.cumsum([len(c) for c in clips])]).astype(np.int32)
    return TokenBatch(
        req_id=1,
        op=Op.EXTRACT,
        model_slot=0,
        offsets=(np.arange(n + 1) * len(prompt)).astype(np.int32),
        input_ids=np.tile(np.asarray(prompt, np.int32), n),
        output_mask=mask,
        samples=np.concatenate(clips),
        sample_offsets=sample_offsets,
        scalar=temperature,
    )


def rows(output: Output) -> list[list[float]]:
    assert output.row_offsets is not None
    bounds = output.row_offsets.tolist()
    return [output.values[bounds[i] : bounds[i + 1], 0].tolist() for i in range(output.n_items)]


def generated(reference: Any, clips: list[np.ndarray], **kwargs: Any) -> Any:
    model, features, _ = reference
    extracted = features(clips, sampling_rate=RATE, return_attention_mask=True, return_tensors="pt")
    with torch.no_grad():
        return model.generate(extracted.input_features, attention_mask=extracted.attention_mask, **kwargs)


def trimmed(row: list[int], pad: int) -> list[int]:
    while row and row[-1] == pad:
        row = row[:-1]
    return row


@pytest.mark.parametrize("timestamps", [False, True], ids=["text", "timestamps"])
def test_tokens_equal_generate(adapter: WhisperAdapter, reference: Any, timestamps: bool) -> None:
    prompt = ids(reference, "<|startoftranscript|>") + (
        [] if timestamps else ids(reference, "<|notimestamps|>")
    )
    got = rows(device_run(adapter, request(CLIPS, prompt, OutputMask.TOKENS))[ResultKind.TOKENS])
    want = generated(reference, CLIPS, return_timestamps=timestamps)
    languages = reference[0].detect_language(input_features=_features(reference, CLIPS)).tolist()
    pad = adapter.pad_token_id
    for i, row in enumerate(got):
        assert [int(t) for t in row] == [languages[i], *trimmed(want[i].tolist(), pad)]
    assert any(t >= ids(reference, "<|notimestamps|>")[0] + 1 for t in got[0]) == timestamps


def test_a_named_language_is_used(adapter: WhisperAdapter, reference: Any) -> None:
    german, start = ids(reference, "<|de|>", "<|startoftranscript|>")
    got = rows(device_run(adapter, request(CLIPS[:2], [start, german], OutputMask.TOKENS))[ResultKind.TOKENS])
    want = generated(reference, CLIPS[:2], language="de", return_timestamps=True)
    for i, row in enumerate(got):
        assert [int(t) for t in row] == [german, *trimmed(want[i].tolist(), adapter.pad_token_id)]


def test_token_times_equal_generate(adapter: WhisperAdapter, reference: Any) -> None:
    prompt = ids(reference, "<|startoftranscript|>")
    attention = adapter._live().config._attn_implementation
    outputs = device_run(adapter, request(CLIPS[:2], prompt, OutputMask.TOKENS | OutputMask.TOKEN_TIMES))
    # generate switches to eager attention for token times; the adapter switches back.
    assert adapter._live().config._attn_implementation == attention
    want = generated(reference, CLIPS[:2], return_timestamps=True, return_token_timestamps=True)
    for i, (tokens, times) in enumerate(
        zip(rows(outputs[ResultKind.TOKENS]), rows(outputs[ResultKind.TOKEN_TIMES]), strict=True)
    ):
        n = len(tokens) - 1
        assert [int(t) for t in tokens[1:]] == want["sequences"][i, :n].tolist()
        assert np.isnan(times[0])
        np.testing.assert_allclose(times[1:], want["token_timestamps"][i, :n].numpy(), atol=1e-6)


def test_batch_equals_single(adapter: WhisperAdapter, reference: Any) -> None:
    prompt = ids(reference, "<|startoftranscript|>", "<|notimestamps|>")
    batch = rows(
        device_run(adapter, request([CLIPS[2], CLIPS[0], CLIPS[2]], prompt, OutputMask.TOKENS))[
            ResultKind.TOKENS
        ]
    )
    singles = [
        rows(device_run(adapter, request([clip], prompt, OutputMask.TOKENS))[ResultKind.TOKENS])[0]
        for clip in CLIPS[::2]
    ]
    assert batch == [singles[1], singles[0], singles[1]]
    assert batch[0] != batch[1]  # different audio gives different tokens: the rows are not swapped


def _features(reference: Any, clips: list[np.ndarray]) -> torch.Tensor:
    return reference[1](clips, sampling_rate=RATE, return_tensors="pt").input_features
