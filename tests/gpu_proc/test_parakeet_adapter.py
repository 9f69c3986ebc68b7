"""ParakeetAdapter through the device path against `ParakeetForTDT.generate` on the same weights.

The reference is what a user of transformers writes: the processor on the same samples (features
and attention mask), then `generate`. Its output holds every decode step (blanks included) and each
step's frame advance; the tokens a row emits, their frames and durations must be ours exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.parakeet import ParakeetAdapter, length_groups
from sie.gpu_proc.adapters.tdt_greedy import MAX_SYMBOLS_PER_FRAME, greedy_tdt
from sie.gpu_proc.outputs import Output
from sie.model_config import parse_model_config
from sie.shm.layout import Op, OutputMask, ResultKind, TokenBatch
from tests.gpu_proc.device_path import device_run
from tests.media_samples import tone
from tests.tiny_models.parakeet import make_parakeet, model_yaml_parakeet

RATE = 16000
FRAME_S = 0.08  # hop 160 at 16 kHz, subsampled 8 times
NOISE = (np.random.default_rng(0).standard_normal(RATE * 9) * 0.3).astype(np.float32)
CLIPS = [NOISE[: 3 * RATE] * 0.2, NOISE, tone(1.3, RATE, 300.0) + NOISE[: int(1.3 * RATE)]]
STEADY = tone(3.0, RATE)  # the tiny model stays on one frame of a pure tone, emitting token after token

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_parakeet(tmp_path_factory.mktemp("parakeet"))


@pytest.fixture(scope="module")
def adapter(folder: Path) -> ParakeetAdapter:
    loaded = load_adapter(parse_model_config(model_yaml_parakeet("tiny/parakeet", folder)), folder, "cpu")
    assert isinstance(loaded, ParakeetAdapter)
    return loaded


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    import transformers

    return (
        transformers.ParakeetForTDT.from_pretrained(folder).eval(),
        transformers.AutoProcessor.from_pretrained(folder),
    )


def request(clips: list[np.ndarray], mask: int) -> TokenBatch:
    n = len(clips)
    return TokenBatch(
        req_id=1,
        op=Op.EXTRACT,
        model_slot=0,
        offsets=np.zeros(n + 1, np.int32),
        input_ids=np.zeros(0, np.int32),
        output_mask=mask,
        samples=np.concatenate(clips),
        sample_offsets=np.concatenate([[0], np.cumsum([len(c) for c in clips])]).astype(np.int32),
    )


def rows(output: Output) -> list[np.ndarray]:
    assert output.row_offsets is not None
    bounds = output.row_offsets.tolist()
    return [output.values[bounds[i] : bounds[i + 1]] for i in range(output.n_items)]


def generated(reference: Any, clips: list[np.ndarray]) -> list[list[tuple[int, int, int]]]:
    """Per clip, generate's emitted (token, frame, duration): its steps walked up to the clip's
    encoder length (after that a row only pads)."""
    model, processor = reference
    inputs = processor(audio=clips, sampling_rate=RATE, return_tensors="pt")
    with torch.no_grad():
        encoded = model.get_audio_features(
            input_features=inputs.input_features,
            attention_mask=inputs.attention_mask,
            output_attention_mask=True,
        )
        # The buffer generate would size itself (it warns when left to do so).
        out = model.generate(
            **inputs, max_new_tokens=model.max_symbols_per_step * encoded.pooler_output.shape[1]
        )
    assert int(out.sequences.max()) < model.config.vocab_size  # no duration logit won generate's argmax
    blank = model.config.blank_token_id
    emitted: list[list[tuple[int, int, int]]] = []
    for row, length in enumerate(encoded.attention_mask.sum(-1).tolist()):
        frame, found = 0, []
        for token, duration in zip(
            out.sequences[row, 1:].tolist(), out.durations[row, 1:].tolist(), strict=True
        ):
            if frame >= length:
                break
            if token != blank:
                found.append((token, frame, duration))
            frame += duration
        emitted.append(found)
    return emitted


def test_tokens_and_times_equal_generate(adapter: ParakeetAdapter, reference: Any) -> None:
    outputs = device_run(adapter, request(CLIPS, OutputMask.TOKENS | OutputMask.TOKEN_TIMES))
    want = generated(reference, CLIPS)
    assert sum(len(w) for w in want) > 10  # the random model does speak
    assert max(longest_stay(w) for w in want) < MAX_SYMBOLS_PER_FRAME  # where generate has no limit
    for tokens, times, expected in zip(
        rows(outputs[ResultKind.TOKENS]), rows(outputs[ResultKind.TOKEN_TIMES]), want, strict=True
    ):
        assert tokens[:, 0].astype(int).tolist() == [t for t, _, _ in expected]
        starts = [f * FRAME_S for _, f, _ in expected]
        ends = [(f + d) * FRAME_S for _, f, d in expected]
        np.testing.assert_allclose(times, np.asarray([starts, ends]).T.reshape(-1, 2), atol=1e-5)


def test_a_row_that_stays_on_a_frame_moves_on_where_generate_repeats(
    adapter: ParakeetAdapter, reference: Any
) -> None:
    [want] = generated(reference, [STEADY])
    first = next(i for i in range(len(want)) if longest_stay(want[: i + 1]) == MAX_SYMBOLS_PER_FRAME)
    [tokens] = rows(device_run(adapter, request([STEADY], OutputMask.TOKENS))[ResultKind.TOKENS])
    # Up to the limit every token is generate's; generate then goes on repeating, we move on.
    assert tokens[: first + 1, 0].astype(int).tolist() == [t for t, _, _ in want[: first + 1]]
    assert len(tokens) < len(want) and longest_stay(want) > MAX_SYMBOLS_PER_FRAME


def longest_stay(emissions: list[tuple[int, int, int]]) -> int:
    """The most tokens emitted on one frame in a row."""
    longest = run = 0
    for i, (_, frame, _) in enumerate(emissions):
        run = run + 1 if i and emissions[i - 1][1] == frame else 1
        longest = max(longest, run)
    return longest


def test_batch_equals_single(adapter: ParakeetAdapter) -> None:
    batch = rows(
        device_run(adapter, request([CLIPS[1], CLIPS[0], CLIPS[1]], OutputMask.TOKENS))[ResultKind.TOKENS]
    )
    singles = [
        rows(device_run(adapter, request([c], OutputMask.TOKENS))[ResultKind.TOKENS])[0] for c in CLIPS[:2]
    ]
    assert [r.tolist() for r in batch] == [singles[1].tolist(), singles[0].tolist(), singles[1].tolist()]
    assert batch[0].tolist() != batch[1].tolist()


def test_a_padded_budget_splits_the_batch_without_changing_it(adapter: ParakeetAdapter) -> None:
    whole = rows(device_run(adapter, request(CLIPS, OutputMask.TOKENS))[ResultKind.TOKENS])
    budget = adapter._max_padded_samples
    adapter._max_padded_samples = len(NOISE)  # one row per forward
    try:
        split = rows(device_run(adapter, request(CLIPS, OutputMask.TOKENS))[ResultKind.TOKENS])
    finally:
        adapter._max_padded_samples = budget
    assert [r.tolist() for r in split] == [r.tolist() for r in whole]


def test_a_piece_too_short_to_normalize_is_empty(adapter: ParakeetAdapter) -> None:
    outputs = device_run(adapter, request([NOISE[:100], CLIPS[0]], OutputMask.TOKENS))
    short, whole = rows(outputs[ResultKind.TOKENS])
    assert len(short) == 0 and len(whole) > 0


def test_length_groups_keep_padded_rows_within_the_budget() -> None:
    assert length_groups([10, 30, 20, 30], 60) == [[1, 3], [2, 0]]
    assert length_groups([100, 5], 50) == [[0], [1]]  # a row over the budget runs on its own


def test_zero_durations_are_cut_after_max_symbols(reference: Any) -> None:
    """A joint that always predicts a token with duration 0 would never advance; NeMo's rule moves
    it on after MAX_SYMBOLS_PER_FRAME tokens, so each frame emits exactly that many."""
    model, _ = reference
    vocab = model.config.vocab_size
    head = torch.nn.Linear(model.joint.head.in_features, model.joint.head.out_features)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[5] = 1.0  # always token 5
        head.bias[vocab] = 1.0  # always duration 0
    joint = torch.nn.Module()
    joint.head, joint.activation = head, model.joint.activation
    encoded = torch.zeros(2, 4, head.in_features)
    decoded = greedy_tdt(
        model.decoder,
        joint,
        encoded,
        torch.tensor([4, 2]),
        blank_id=model.config.blank_token_id,
        vocab_size=vocab,
        durations=model.config.durations,
    )
    for row, frames in zip(decoded, (4, 2), strict=True):
        assert len(row) == MAX_SYMBOLS_PER_FRAME * frames
        assert [e.frame for e in row] == [f for f in range(frames) for _ in range(MAX_SYMBOLS_PER_FRAME)]
        assert {e.token for e in row} == {5}
