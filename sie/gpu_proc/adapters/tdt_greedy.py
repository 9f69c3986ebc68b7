"""Greedy decoding of a token-and-duration transducer (TDT), a padded batch of rows at a time.

Each step the joint network scores every row's current encoder frame against its prediction
network state: the token is the argmax of the vocabulary logits (blank included), the frame advance
is `durations[argmax]` of the duration logits. This is what `ParakeetForTDT.generate` does, with
two differences that make it usable as a server's decoder:

- a row that emits `max_symbols_per_frame` tokens in a row without advancing is moved on one
  frame (NeMo's greedy TDT rule); `generate` has no such limit, and a model that keeps predicting
  a token with duration 0 then repeats it until its output buffer is full;
- the token is the argmax of the vocabulary logits only, where `generate` takes the argmax of
  token and duration logits together (an out-of-vocabulary id whenever a duration logit wins).

A blank never stays on its frame (a blank with duration 0 advances one frame), only rows that emit
a token feed it to the prediction network, and each row stops at its own encoder length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

MAX_SYMBOLS_PER_FRAME = 10  # NeMo's default for greedy TDT decoding


@dataclass(frozen=True, slots=True)
class Emission:
    """One emitted (non-blank) token: its id, the encoder frame it was emitted at, and the frames
    the decoder advanced after it (its predicted duration, or 1 when it was forced on)."""

    token: int
    frame: int
    duration: int


@torch.inference_mode()
def greedy_tdt(
    decoder: Any,
    joint: Any,
    encoded: torch.Tensor,
    lengths: torch.Tensor,
    *,
    blank_id: int,
    vocab_size: int,
    durations: Sequence[int],
    max_symbols_per_frame: int = MAX_SYMBOLS_PER_FRAME,
) -> list[list[Emission]]:
    """Per row of `encoded` [batch, frames, hidden] (projected encoder states), its emissions.

    `decoder` is transformers' `ParakeetRNNTDecoder` (embedding, lstm, decoder_projector), `joint`
    its joint network (activation, head); `lengths` [batch] are the valid frames of each row."""
    batch, frames, _ = encoded.shape
    if batch == 0 or frames == 0:
        return [[] for _ in range(batch)]
    device = encoded.device
    rows = torch.arange(batch, device=device)
    advances = torch.as_tensor(list(durations), device=device, dtype=torch.long)
    lengths = lengths.to(device=device, dtype=torch.long)
    frame = torch.zeros(batch, device=device, dtype=torch.long)
    repeats = torch.zeros_like(frame)  # tokens emitted in a row without advancing
    state = _start_state(decoder, batch, blank_id, encoded)
    steps: list[torch.Tensor] = []  # per step [4, batch]: token, frame, advance, emitted
    active = frame < lengths
    while bool(active.any()):
        frames_now = encoded[rows, frame.clamp(max=frames - 1)]
        logits = joint.head(joint.activation(frames_now + state[0])).float()
        token = logits[:, :vocab_size].argmax(dim=-1)
        advance = advances[logits[:, vocab_size:].argmax(dim=-1)]
        is_blank = token == blank_id
        advance = torch.where(is_blank & (advance == 0), 1, advance)
        emitted = active & ~is_blank
        repeats = torch.where(emitted & (advance == 0), repeats + 1, 0)
        forced = repeats >= max_symbols_per_frame
        advance = torch.where(forced, 1, advance)
        repeats = torch.where(forced, 0, repeats)
        steps.append(torch.stack((token, frame, advance, emitted.long())))
        if bool(emitted.any()):
            state = _fed(decoder, token, emitted, state)
        frame = frame + torch.where(active, advance, 0)
        active = frame < lengths
    return _emissions(steps, batch)


State = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (prediction, lstm hidden, lstm cell)


def _start_state(decoder: Any, batch: int, blank_id: int, encoded: torch.Tensor) -> State:
    """The prediction network from a zero state fed the blank token (how decoding starts)."""
    lstm = decoder.lstm
    zeros = torch.zeros(
        (lstm.num_layers, batch, lstm.hidden_size), device=encoded.device, dtype=encoded.dtype
    )
    start = torch.full((batch, 1), blank_id, device=encoded.device, dtype=torch.long)
    output, (hidden, cell) = lstm(decoder.embedding(start), (zeros, zeros.clone()))
    return decoder.decoder_projector(output)[:, 0], hidden, cell


def _fed(decoder: Any, token: torch.Tensor, emitted: torch.Tensor, state: State) -> State:
    """The state after feeding each emitting row its token; other rows keep theirs."""
    prediction, hidden, cell = state
    output, (next_hidden, next_cell) = decoder.lstm(decoder.embedding(token[:, None]), (hidden, cell))
    next_prediction = decoder.decoder_projector(output)[:, 0]
    per_layer = emitted.view(1, -1, 1)
    return (
        torch.where(emitted[:, None], next_prediction, prediction),
        torch.where(per_layer, next_hidden, hidden),
        torch.where(per_layer, next_cell, cell),
    )


def _emissions(steps: list[torch.Tensor], batch: int) -> list[list[Emission]]:
    # One transfer for the whole decode: [4, batch, steps] on the host.
    tokens, frames, advances, emitted = torch.stack(steps, dim=-1).cpu().tolist()
    return [
        [
            Emission(tokens[row][i], frames[row][i], advances[row][i])
            for i in range(len(steps))
            if emitted[row][i]
        ]
        for row in range(batch)
    ]
