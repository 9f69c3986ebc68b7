"""A padding-free forward for BERT-style encoders (BERT, RoBERTa, XLM-R and their kin).

A batch's real tokens run as one `[total_tokens, hidden]` stream through every Linear, LayerNorm
and feed-forward block, so no compute goes to padding. Only attention needs to know where each
sequence starts: sequences are sorted by length and cut into groups whose padding stays small,
and each group's queries, keys and values are gathered into a small padded block for one SDPA call
(torch's CPU build has no fused kernel for jagged attention; per-sequence calls cost more than
they save on short texts). The group plan is made once per batch and reused by every layer.

The weights are the Hugging Face model's own modules, so any checkpoint of a supported
architecture runs unchanged; other architectures (MPNet, ModernBERT, ...) keep the padded path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from sie.gpu_proc.adapters.cuda_graphs import Replays
from sie.gpu_proc.adapters.varlen import FULL, Sequences, attend, sequences
from sie.gpu_proc.transfer import to_device

# model_type -> first position id (RoBERTa-style models count positions from padding_idx + 1).
_POSITION_START = {"bert": None, "roberta": "pad+1", "xlm-roberta": "pad+1", "camembert": "pad+1"}
# Attention groups: close a group when its padding would exceed this share of its padded tokens,
# but only once it holds MIN_GROUP_ITEMS sequences: each group costs a few tensor ops per layer,
# which outweigh the padded attention they save for short texts (attention is the small part of
# an encoder layer; the dense layers, which never see padding here, are the large one).
MAX_GROUP_WASTE = 0.2
MIN_GROUP_ITEMS = 8


@dataclass(frozen=True, slots=True)
class AttentionGroup:
    """Sequences of similar length attended as one padded block."""

    index: torch.Tensor  # long [g * Lg]: stream rows, the stream's length (a zero row) on padding
    keys: torch.Tensor  # bool [g, Lg]: which positions may be attended to
    real: torch.Tensor  # long: the block's token positions in its flattened [g * Lg] rows
    rows: torch.Tensor  # long: index[real], where the block's results go back in the stream


class Packing:
    """Where each item's tokens sit in the flat stream, and the attention groups over them, planned
    on first use (a forward through the varlen kernel never needs them)."""

    __slots__ = ("_group_plan", "_groups", "_lengths", "_masked", "positions", "shape", "tokens")

    def __init__(
        self,
        shape: tuple[int, int],
        tokens: torch.Tensor | None,
        positions: torch.Tensor | None,
        group_plan: Callable[[], list[AttentionGroup]] | None = None,
        *,
        lengths: list[int] | None = None,
        masked: bool = False,
    ) -> None:
        self.shape = shape  # [n, L] of the padded input
        # The real (computed) tokens as rows of the flattened [n * L] input, and their positions in
        # their item: a gather by a long index costs a third of a boolean mask's, which finds it
        # anew. None when every item is as long as the input and attends to every token (one item,
        # or equal lengths): the stream is the input itself, and attention needs no gather or mask.
        self.tokens = tokens
        self.positions = positions
        self._group_plan = group_plan
        self._groups: list[AttentionGroup] | None = None
        self._lengths = lengths or []
        self._masked = masked  # some keys are hidden from attention (a key mask)

    @property
    def uniform(self) -> bool:
        return self.tokens is None

    @property
    def groups(self) -> list[AttentionGroup]:
        if self._groups is None:
            self._groups = self._group_plan() if self._group_plan is not None else []
        return self._groups

    def varlen(self, dtype: torch.dtype, head_dim: int) -> Sequences | None:
        """The sequences for the varlen kernel where it applies to this batch (sie.gpu_proc.adapters
        .varlen); never to a uniform batch, which one plain attention call takes whole, or to one
        with hidden keys."""
        if self.tokens is None or self._masked:
            return None
        return sequences(self._lengths, self.tokens.device, dtype, head_dim)


class PackedEncoder:
    """Runs a BERT-style base model's embeddings and layers on packed tokens."""

    def __init__(self, base: Any) -> None:
        self._base = base
        config = base.config
        self._heads = int(config.num_attention_heads)
        pad = int(config.pad_token_id or 0)
        self._position_offset = pad + 1 if _POSITION_START[config.model_type] else 0
        self._replays = Replays(base, self._stream_body)

    @staticmethod
    def wrap(base: Any) -> PackedEncoder | None:
        """A packed runner for `base` (the encoder, e.g. `model.bert`), or None if unsupported."""
        config = getattr(base, "config", None)
        if config is None or config.model_type not in _POSITION_START:
            return None
        if not type(base).__module__.startswith("transformers.models."):
            return None  # a model's own code (trust_remote_code) may reuse a native model_type name
        if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
            return None
        if getattr(config, "position_embedding_type", "absolute") not in (None, "absolute"):
            return None
        if getattr(config, "chunk_size_feed_forward", 0):
            return None
        return PackedEncoder(base)

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        lengths: list[int],
        token_type_ids: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Last hidden states [n, L, hidden], zero on padding, equal to the padded forward's.

        `lengths` are the tokens computed per item; `key_mask` ([n, L], optional) says which of
        them the others may attend to (ColBERT's query expansion computes tokens nobody attends to).
        """
        packing = plan(lengths, input_ids.shape[1], key_mask, input_ids.device)
        ids = streamed(input_ids, packing)
        positions = stream_positions(packing, input_ids) + self._position_offset
        types = streamed(token_type_ids, packing) if token_type_ids is not None else torch.zeros_like(ids)
        head_dim = self._base.config.hidden_size // self._heads
        seqs = packing.varlen(self._base.embeddings.word_embeddings.weight.dtype, head_dim)
        flat = None
        if key_mask is None:
            flat = self._replays.run(ids, types, positions, seqs, lengths, head_dim)
        if flat is None:
            flat = self._layers(ids, types, positions, packing, seqs)
        return unpacked(flat, packing)

    def _stream_body(
        self, ids: torch.Tensor, types: torch.Tensor, positions: torch.Tensor, seqs: Sequences
    ) -> torch.Tensor:
        """The stream attended through the varlen kernel alone: what a CUDA graph records."""
        return self._layers(ids, types, positions, None, seqs)

    def _layers(
        self,
        ids: torch.Tensor,
        types: torch.Tensor,
        positions: torch.Tensor,
        packing: Packing | None,
        seqs: Sequences | None,
    ) -> torch.Tensor:
        """Embeddings and every layer over the stream."""
        flat = self._embed(ids, types, positions)
        for layer in self._base.encoder.layer:
            flat = self._layer(layer, flat, packing, seqs)
        return flat

    def _embed(self, ids: torch.Tensor, types: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The embedded stream."""
        embeddings = self._base.embeddings
        hidden = embeddings.word_embeddings(ids)
        hidden = hidden + embeddings.token_type_embeddings(types) + embeddings.position_embeddings(positions)
        return embeddings.LayerNorm(hidden)

    def _layer(
        self, layer: Any, hidden: torch.Tensor, packing: Packing | None, seqs: Sequences | None
    ) -> torch.Tensor:
        attention = layer.attention
        context = self._attend(attention.self, hidden, packing, seqs)
        attended = attention.output.LayerNorm(attention.output.dense(context) + hidden)
        inner = layer.intermediate.intermediate_act_fn(layer.intermediate.dense(attended))
        return layer.output.LayerNorm(layer.output.dense(inner) + attended)

    def _attend(
        self, self_attention: Any, hidden: torch.Tensor, packing: Packing | None, seqs: Sequences | None
    ) -> torch.Tensor:
        width = hidden.shape[-1]
        head_dim = width // self._heads
        projections = (self_attention.query, self_attention.key, self_attention.value)
        if seqs is not None:  # CUDA: one varlen kernel over the stream (sie.gpu_proc.adapters.varlen)
            q, k, v = (proj(hidden).view(-1, self._heads, head_dim) for proj in projections)
            out = attend(q, k, v, seqs, FULL)
            if out is not None:
                return out.reshape(-1, width)
        if packing is None:  # a graph's body: padded groups would need the batch's own plan
            raise RuntimeError("varlen attention is unavailable")
        if packing.uniform:
            n, length = packing.shape
            q, k, v = (
                proj(hidden).view(n, length, self._heads, head_dim).transpose(1, 2) for proj in projections
            )
            out = F.scaled_dot_product_attention(q, k, v)
            return out.transpose(1, 2).reshape(n * length, width)
        # One [T + 1, 3, width] tensor, so each group takes q, k and v with a single gather; row T
        # is zeros, what padding positions gather.
        tokens = hidden.shape[0]
        qkv = hidden.new_empty((tokens + 1, 3, width))
        qkv[tokens] = 0
        for i, proj in enumerate(projections):
            qkv[:tokens, i] = proj(hidden)
        context = hidden.new_empty(hidden.shape)
        for group in packing.groups:
            g, length = group.keys.shape
            block = qkv.index_select(0, group.index).view(g, length, 3, self._heads, head_dim)
            q, k, v = (block[:, :, i].transpose(1, 2) for i in range(3))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=group.keys[:, None, None, :])
            block_rows = out.transpose(1, 2).reshape(g * length, width).index_select(0, group.real)
            context.index_copy_(0, group.rows, block_rows)
        return context


def plan(lengths: list[int], width: int, key_mask: torch.Tensor | None, device: torch.device) -> Packing:
    """The flat layout of a right-padded batch and its attention groups (sorted by length).

    Built with numpy and moved over in one copy: a few dozen tiny torch operations per batch cost
    more than a one-layer model's forward.
    """
    n = len(lengths)
    if key_mask is None and min(lengths) == width:
        return Packing((n, width), None, None)
    sizes = np.asarray(lengths, np.int64)
    tokens = np.flatnonzero(np.arange(width)[None, :] < sizes[:, None])
    tokens_t, positions_t = to_device([tokens, tokens % width], device)
    groups = functools.partial(_attention_groups, sizes, key_mask, tokens_t, device)
    return Packing((n, width), tokens_t, positions_t, groups, lengths=lengths, masked=key_mask is not None)


def _attention_groups(
    sizes: np.ndarray, key_mask: torch.Tensor | None, tokens: torch.Tensor, device: torch.device
) -> list[AttentionGroup]:
    """Runs of similar length, each gathered from the stream into a padded block."""
    starts = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    total = int(sizes.sum())
    flat_keys = None
    if key_mask is not None:  # one zero past the end: what padding positions gather
        keys_in_stream = key_mask.bool().reshape(-1).index_select(0, tokens)
        flat_keys = torch.cat([keys_in_stream, keys_in_stream.new_zeros(1)])
    order = np.argsort(sizes, kind="stable")
    planned: list[np.ndarray] = []
    for members in _groups(sizes[order].tolist(), MAX_GROUP_WASTE):
        items = order[members]
        offsets = np.arange(sizes[items].max())
        real = offsets[None, :] < sizes[items][:, None]
        index = np.where(real, starts[items][:, None] + offsets[None, :], total)
        planned += [index, np.flatnonzero(real), index[real]]
    moved = to_device(planned, device)
    groups = []
    for index, real_rows, rows in zip(moved[::3], moved[1::3], moved[2::3], strict=True):
        real = index != total  # padding positions gather the zero row past the stream's end
        keys = real if flat_keys is None else real & flat_keys[index]
        groups.append(AttentionGroup(index.reshape(-1), keys, real_rows, rows))
    return groups


def _groups(sorted_lengths: list[int], max_waste: float, min_items: int = MIN_GROUP_ITEMS) -> list[list[int]]:
    """Consecutive runs of the sorted lengths whose padding stays under `max_waste` (a run shorter
    than `min_items` grows past that bound instead of closing)."""
    groups: list[list[int]] = []
    current: list[int] = []
    real = 0
    for j, length in enumerate(sorted_lengths):
        too_wasteful = real + length < (1 - max_waste) * (len(current) + 1) * length
        if len(current) >= min_items and too_wasteful:
            groups.append(current)
            current, real = [], 0
        current.append(j)
        real += length
    if current:
        groups.append(current)
    return groups


def streamed(padded: torch.Tensor, packing: Packing) -> torch.Tensor:
    """A per-token [n, L] tensor as the stream: its real tokens, in stream order."""
    flat = padded.reshape(-1)
    return flat if packing.tokens is None else flat.index_select(0, packing.tokens)


def stream_positions(packing: Packing, input_ids: torch.Tensor) -> torch.Tensor:
    """Each streamed token's position in its own sequence (rotary models count from every start)."""
    if packing.positions is not None:
        return packing.positions
    n, length = input_ids.shape
    return torch.arange(length, device=input_ids.device).repeat(n)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """The rotary embedding's partner of each coordinate (the halves swapped, the first negated)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def unpacked(flat: torch.Tensor, packing: Packing) -> torch.Tensor:
    """The stream's rows back in the padded [n, L, hidden] layout, zeros on padding."""
    if packing.tokens is None:
        return flat.view(*packing.shape, flat.shape[-1])
    out = flat.new_zeros((packing.shape[0] * packing.shape[1], flat.shape[-1]))
    out.index_copy_(0, packing.tokens, flat)
    return out.view(*packing.shape, flat.shape[-1])
