"""Running a batch through out-of-memory: smaller pieces, then less company, then a clean refusal.

When a forward runs out of device memory, the cached blocks are freed and the batch is retried
once as it was (an allocator's fragmentation often clears with its cache, as SIE's ladder assumes
too), then in halves (recursively: activations shrink with the batch). A single item that still
does not fit gets one more try after another model is unloaded. Only the items that fail even then are
refused (503 RESOURCE_EXHAUSTED, Retry-After 5); the rest of the batch is answered as usual, and
the device process goes on.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sie.gpu_proc.batcher import Batch, PendingItem
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

log = logging.getLogger(__name__)

Forward = Callable[[Batch], dict[ResultKind, Output]]


@dataclass(frozen=True, slots=True)
class Recovered:
    done: Batch | None  # the items that ran, in output row order; None if none did
    outputs: dict[ResultKind, Output] | None
    failed: list[PendingItem]  # the items refused for lack of memory
    message: str


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA's OutOfMemoryError, the CPU allocator's refusal, or Python's MemoryError."""
    text = str(exc).lower()
    return (
        isinstance(exc, MemoryError)
        or type(exc).__name__ == "OutOfMemoryError"
        or "out of memory" in text
        or "can't allocate memory" in text
    )


def run_recovering(
    forward: Forward, batch: Batch, *, free_cache: Callable[[], None], evict_other: Callable[[], bool]
) -> Recovered:
    """`forward(batch)`, recovering from out-of-memory errors as the module docstring says.

    Any other exception propagates: it is not a matter of size.
    """
    attempt = _Attempt(forward, free_cache, evict_other)
    message = attempt.run(batch, again=True)
    if not attempt.pieces:
        return Recovered(None, None, attempt.failed, message)
    items = [item for piece, _ in attempt.pieces for item in piece.items]
    kinds = attempt.pieces[0][1].keys()
    outputs = {kind: Output.concat([out[kind] for _, out in attempt.pieces]) for kind in kinds}
    return Recovered(_sub_batch(batch, items), outputs, attempt.failed, message)


@dataclass(slots=True)
class _Attempt:
    forward: Forward
    free_cache: Callable[[], None]
    evict_other: Callable[[], bool]
    pieces: list[tuple[Batch, dict[ResultKind, Output]]] = field(default_factory=list)
    failed: list[PendingItem] = field(default_factory=list)

    def run(self, batch: Batch, again: bool = False) -> str:
        """Run `batch` into `pieces`, or its items into `failed`; the last out-of-memory message.
        `again`: after a failure and the cache freed, try the same batch once more before halving."""
        message = self._try(batch)
        if not message:
            return ""
        self.free_cache()
        if again:
            log.warning("out of memory; retrying with the cache freed", extra={"items": len(batch.items)})
            message = self._try(batch)
            if not message:
                return ""
            self.free_cache()
        if len(batch.items) > 1:
            log.warning("out of memory; retrying in halves", extra={"items": len(batch.items)})
            half = len(batch.items) // 2
            first = self.run(_sub_batch(batch, batch.items[:half]))
            return self.run(_sub_batch(batch, batch.items[half:])) or first
        if self.evict_other():
            message = self._try(batch)
            if not message:
                return ""
            self.free_cache()
        log.error("out of memory on a single item; refusing it", extra={"tokens": batch.n_tokens})
        self.failed.extend(batch.items)
        return message

    def _try(self, batch: Batch) -> str:
        """ "" when it ran, else the out-of-memory message (other errors propagate)."""
        try:
            self.pieces.append((batch, self.forward(batch)))
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            return f"{type(exc).__name__}: {exc}"
        return ""


def _sub_batch(batch: Batch, items: list[PendingItem]) -> Batch:
    lengths = [len(item.input_ids) for item in items]
    return dataclasses.replace(batch, items=items, n_tokens=sum(lengths), max_length=max(lengths))
