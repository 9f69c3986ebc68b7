"""Long recordings cut into pieces of at most 30 s at their quietest moments (Parakeet's windows).

In one long pass a Parakeet model can skip whole stretches of speech, so SIE decodes audio of more
than 30 s in contiguous, non-overlapping pieces: each ends in the middle of the quietest 100 ms
frame (lowest RMS, the first on ties) of the last 8 s before its 30 s mark.
"""

from __future__ import annotations

import numpy as np

PIECE_S = 30.0
SEARCH_S = 8.0
FRAME_S = 0.1
_INT16_SCALE = np.float32(32768.0)  # RMS on the int16 scale, where the floor below is negligible


def pause_cuts(samples: np.ndarray, rate: int) -> list[tuple[int, int]]:
    """(start, end) sample spans covering `samples` in order; one span when it fits one piece."""
    total = len(samples)
    piece = round(PIECE_S * rate)
    if total <= piece:
        return [(0, total)]
    hop, search = round(FRAME_S * rate), round(SEARCH_S * rate)
    n_frames = total // hop
    frames = samples[: n_frames * hop].reshape(n_frames, hop) * _INT16_SCALE
    rms = np.sqrt(np.mean(np.square(frames), axis=1) + 1e-9)
    spans: list[tuple[int, int]] = []
    start = 0
    while total - start > piece:
        first, last = (start + piece - search) // hop, (start + piece) // hop
        cut = (first + int(np.argmin(rms[first:last]))) * hop + hop // 2
        spans.append((start, cut))
        start = cut
    spans.append((start, total))
    return spans
