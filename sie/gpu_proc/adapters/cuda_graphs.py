"""CUDA graphs for the device's small forwards: one replay where an eager forward launches hundreds
of kernels. The packed encoders' and decoders' token stream replays through `Replays`, a batch of
same-shaped items (CLIP's images) through `ItemReplays`.

A small encoder's forward on a GPU is bound by kernel launches: MiniLM-L6 takes about 1.6 ms on an
H200 for one item or for 64, nearly all of it the host launching kernels, and a device process
that launches one batch after another leaves the GPU idle most of the time. A CUDA graph records a
forward's kernels once and replays them with one launch.

A graph replays fixed shapes, so batches are rounded up to buckets: for a stream, its token count,
the number of sequences and the longest sequence; for items, their count. Rows past the batch's
tokens belong to no sequence: the varlen kernel leaves them alone and every other layer works row
by row, so they never reach a real token, and the caller reads only the first rows. Sequences past
the batch's are empty. Items past the batch's hold an earlier batch's valid inputs and are not read.
Graphs are captured on first use of a bucket, checked against the eager forward on their first
reuse, share one memory pool per model, and the least recently used goes once MAX_GRAPHS are held.
Any failure to capture, or a disagreement, turns them off for the model (its batches run eagerly
from then on); out of memory stays the batch's own failure.
"""

from __future__ import annotations

import bisect
import inspect
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from sie.gpu_proc.adapters.varlen import Sequences, sequences

log = logging.getLogger(__name__)

# Few buckets, so that few graphs are captured (each capture stalls the device for a forward or
# two). Stream tokens go up in steps of a half or a third; longer batches run eagerly, since their
# kernels run long enough that launching them costs a small share. The longest sequence is at least
# 128 tokens, the varlen kernel's block of queries: below it every bound launches the same grid.
TOKEN_BUCKETS = (64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
# A bucket pads a batch by up to half, which a large model pays in arithmetic: its graphs stop at
# about this many parameters x tokens (some 2 TFLOP a forward), 1,536 tokens for a 0.6B model and
# 128 for an 8B one, where its kernels run long enough anyway.
PARAMETER_TOKENS = 1e12
MAX_GRAPHS = 64
MIN_SEQUENCES = 16
MIN_LONGEST = 128
# Items (images of one size) go up in steps of a half or a third too; the largest bucket a model
# replays keeps items x FLOPs per item near the token rule's 2 TFLOP a forward.
ITEM_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)
FLOPS_PER_FORWARD = 2 * PARAMETER_TOKENS

StreamBody = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Sequences], torch.Tensor]


class Graphs:
    """The process's switch (the device sets it from `--cuda-graphs`). The CPU tests set `anywhere`
    and record with a stand-in for the capture."""

    enabled = True
    anywhere = False


_OFF_GRAPHS = "_sie_off_cuda_graphs"


def keep_off_graphs(module: torch.nn.Module) -> None:
    """Never replay graphs for `module` or any module in it: its layers change while it is served
    (LoRA layers are injected and switched), and a graph replays the kernels it recorded."""
    for inner in module.modules():
        object.__setattr__(inner, _OFF_GRAPHS, True)


def kept_off_graphs(module: torch.nn.Module) -> bool:
    return bool(getattr(module, _OFF_GRAPHS, False))


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: int
    sequences: int
    longest: int


def bucket_for(
    tokens: int, sequences: int, longest: int, most_tokens: int = TOKEN_BUCKETS[-1]
) -> Bucket | None:
    """The graph shape a batch runs in, or None when it needs more than `most_tokens`."""
    rounded = round_up(tokens, TOKEN_BUCKETS, most_tokens)
    if rounded is None:
        return None
    return Bucket(rounded, _power_of_two(sequences, MIN_SEQUENCES), _power_of_two(longest, MIN_LONGEST))


def round_up(value: int, buckets: tuple[int, ...], most: int) -> int | None:
    """The smallest of `buckets` that holds `value`, or None past `most` or past the last one."""
    at = bisect.bisect_left(buckets, value)
    if at == len(buckets) or buckets[at] > most:
        return None
    return buckets[at]


def largest_within(buckets: tuple[int, ...], cost_each: float, budget: float, least: int) -> int:
    """The largest of `buckets` whose size x `cost_each` stays within `budget`; `least` at least."""
    return max([least, *(size for size in buckets if size * cost_each <= budget)])


def _power_of_two(value: int, least: int) -> int:
    return max(least, 1 << (value - 1).bit_length())


class StaticInputs(Protocol):
    """The tensors a graph reads, filled from each live batch before a replay."""

    def fill(self, *live: Any) -> None: ...

    def args(self) -> tuple[Any, ...]:
        """The body's arguments over these tensors, as the graph was recorded with them."""
        ...


@dataclass(slots=True)
class _Graph:
    graph: torch.cuda.CUDAGraph
    inputs: StaticInputs
    output: torch.Tensor  # where the graph writes: [bucket rows, ...]
    checked: bool = False  # its first replay over a new batch was compared with the eager forward


class GraphCache:
    """Replays of `body(*args) -> [rows, ...]`, one graph per key (a bucket of shapes).

    A graph keeps whatever its body computed on the host while it was recorded. So the first time
    a graph serves a batch other than the one it was recorded on, the eager forward runs beside the
    replay once, and any disagreement turns graphs off for the model."""

    def __init__(self, body: Callable[..., torch.Tensor], device: torch.device) -> None:
        self._body = body
        self._device = device
        self._graphs: OrderedDict[Hashable, _Graph] = OrderedDict()
        self._pool: tuple[int, int] | None = None  # one memory pool for all, made at the first capture
        self._lock = threading.Lock()  # one replay at a time: the static buffers are shared
        self.failed = False

    def _replay(
        self, key: Hashable, live: tuple[Any, ...], rows: int, allocate: Callable[[], StaticInputs]
    ) -> torch.Tensor | None:
        """The body's first `rows` rows over the live batch `live` (the body's own arguments),
        from the graph for `key`; None where none could be captured."""
        with self._lock:
            entry = self._graphs.get(key)
            if entry is None:
                inputs = allocate()
                inputs.fill(*live)
                entry = self._capture(inputs, key)
                if entry is None:
                    return None
                entry.graph.replay()
                return entry.output[:rows].clone()
            self._graphs.move_to_end(key)
            entry.inputs.fill(*live)
            entry.graph.replay()
            replayed = entry.output[:rows].clone()  # the next replay overwrites the static output
            if not entry.checked:
                entry.checked = True
                eager = self._body(*live)
                if not _agree(replayed, eager):
                    self._turn_off("CUDA graph replay disagrees with the eager forward; running eagerly")
                    return eager
            return replayed

    def _capture(self, inputs: StaticInputs, key: Hashable) -> _Graph | None:
        """A graph of the body over `inputs`, kept for `key`; None (and graphs off) if it can't be."""
        try:
            graph, output = self._record(*inputs.args())
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            self._turn_off("CUDA graph capture failed; running eagerly", exc)
            return None
        if len(self._graphs) >= MAX_GRAPHS:
            self._graphs.popitem(last=False)
        entry = self._graphs[key] = _Graph(graph, inputs, output)
        return entry

    def _record(self, *args: Any) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """CUDA's part: the body run once on a side stream, so kernels set themselves up outside the
        capture, then recorded (nothing runs until a replay)."""
        side = torch.cuda.Stream(self._device)
        side.wait_stream(torch.cuda.current_stream(self._device))
        with torch.cuda.stream(side):
            self._body(*args)
        torch.cuda.current_stream(self._device).wait_stream(side)
        started = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        self._pool = self._pool or torch.cuda.graph_pool_handle()
        # thread_local: the loader thread may be copying another model's weights meanwhile
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            output = self._body(*args)
        log.debug("captured a CUDA graph", extra={"ms": round((time.perf_counter() - started) * 1e3, 1)})
        return graph, output

    def _turn_off(self, message: str, exc: BaseException | None = None) -> None:
        self.failed = True
        self._graphs.clear()
        log.warning(message, extra={"error": repr(exc)} if exc is not None else {})

    def __len__(self) -> int:
        return len(self._graphs)


def may_replay(device: torch.device, graphs: GraphCache | None, module: torch.nn.Module) -> bool:
    """Whether a batch on `device` may replay graphs: they are on (`--cuda-graphs`), the device is
    a GPU (or the CPU tests say anywhere), no failure turned them off for this model, and its
    module is not kept off them (LoRA)."""
    if not Graphs.enabled or (device.type != "cuda" and not Graphs.anywhere):
        return False
    return not (graphs is not None and graphs.failed) and not kept_off_graphs(module)


def weak_body(body: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """`body`, holding its owner only weakly when it is a bound method. The owner keeps its
    replays, so a strong reference back would make a cycle that only a full garbage collection
    frees, and an unloaded model's memory would stay taken until then."""
    if not inspect.ismethod(body):
        return body
    method = weakref.WeakMethod(body)

    def call(*args: Any) -> torch.Tensor:
        bound = method()
        if bound is None:
            raise RuntimeError("the model these CUDA graphs ran is gone")
        return bound(*args)

    return call


def _agree(replayed: torch.Tensor, eager: torch.Tensor) -> bool:
    """Rounding apart (a bucket's larger GEMMs may tile differently), every row points the same way."""
    cosine = torch.nn.functional.cosine_similarity(replayed.float(), eager.float(), dim=-1)
    return bool(cosine.min() > 0.99)


@dataclass(frozen=True, slots=True)
class _StreamInputs:
    """A stream graph's static tensors."""

    ids: torch.Tensor
    types: torch.Tensor
    positions: torch.Tensor
    offsets: torch.Tensor  # int32 [bucket sequences + 1]
    longest: int

    @staticmethod
    def allocate(bucket: Bucket, device: torch.device) -> _StreamInputs:
        ids, types, positions = (
            torch.zeros(bucket.tokens, dtype=torch.long, device=device) for _ in range(3)
        )
        offsets = torch.zeros(bucket.sequences + 1, dtype=torch.int32, device=device)
        return _StreamInputs(ids, types, positions, offsets, bucket.longest)

    def fill(self, ids: torch.Tensor, types: torch.Tensor, positions: torch.Tensor, seqs: Sequences) -> None:
        tokens, bounds = ids.shape[0], seqs.offsets.shape[0]
        self.ids[:tokens].copy_(ids)  # rows past `tokens` keep earlier, valid ids
        self.types[:tokens].copy_(types)
        self.positions[:tokens].copy_(positions)
        self.offsets[:bounds].copy_(seqs.offsets)
        self.offsets[bounds:].fill_(tokens)  # the bucket's spare sequences are empty

    def args(self) -> tuple[Any, ...]:
        return self.ids, self.types, self.positions, Sequences(self.offsets, self.longest)


class StreamGraphs(GraphCache):
    """Replays of `body(ids, types, positions, sequences) -> [tokens, hidden]`, one graph per bucket."""

    def __init__(self, body: StreamBody, device: torch.device, most_tokens: int = TOKEN_BUCKETS[-1]) -> None:
        super().__init__(body, device)
        self._most_tokens = most_tokens

    def run(
        self, ids: torch.Tensor, types: torch.Tensor, positions: torch.Tensor, seqs: Sequences
    ) -> torch.Tensor | None:
        """The body's output for this batch's stream, or None where no graph takes it."""
        tokens = ids.shape[0]
        bucket = bucket_for(tokens, seqs.offsets.shape[0] - 1, seqs.longest, self._most_tokens)
        if bucket is None or self.failed:
            return None
        return self._replay(
            bucket,
            (ids, types, positions, seqs),
            tokens,
            lambda: _StreamInputs.allocate(bucket, self._device),
        )


class Replays:
    """A packed runner's graphs: made at its first CUDA batch, never for a module kept off graphs."""

    def __init__(self, module: torch.nn.Module, body: StreamBody) -> None:
        self._module = module
        self._body = weak_body(body)
        self.graphs: StreamGraphs | None = None

    def run(
        self,
        ids: torch.Tensor,
        types: torch.Tensor,
        positions: torch.Tensor,
        seqs: Sequences | None,
        lengths: list[int],
        head_dim: int,
    ) -> torch.Tensor | None:
        """The stream's hidden states from a graph; None where none applies (the caller runs
        eagerly). `seqs` None: a uniform batch (one item, say), run as equal sequences here."""
        device = ids.device
        if not may_replay(device, self.graphs, self._module):
            return None
        seqs = seqs or sequences(lengths, device, _dtype_of(self._module), head_dim)
        if seqs is None:
            return None
        if self.graphs is None:
            parameters = sum(p.numel() for p in self._module.parameters())
            self.graphs = StreamGraphs(self._body, device, most_tokens_for(parameters))
        return self.graphs.run(ids, types, positions, seqs)


def most_tokens_for(parameters: int) -> int:
    """The largest bucket a model of this many parameters replays (128 tokens at least)."""
    return largest_within(TOKEN_BUCKETS, parameters, PARAMETER_TOKENS, TOKEN_BUCKETS[1])


def _dtype_of(module: torch.nn.Module) -> torch.dtype:
    return next(module.parameters()).dtype
