"""GLiNER bi-encoder span extraction (gliner's BiEncoderSpanGLiNER), run through the `gliner` package.

Each item is the text's ids (with gliner's words_mask as aux) followed by its labels' ids, marked
-1, -2, ... in the aux (see sie/frontend/gliner_bi.py). The labels go through the labels encoder
once per label set and stay cached (SIE's `precompute_labels`); the text part runs through the
model's own forward with those embeddings, one label set per item. Item i gets its raw span logits
`[n_words_i, max_width, n_labels_i]` flattened into rows of one value, as the uni-encoder's adapter
returns them (sie/gpu_proc/adapters/gliner.py), so the frontend decodes both alike.
"""

from __future__ import annotations

import itertools
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.common import compute_dtype, place, release, tensor_bytes
from sie.gpu_proc.adapters.gliner import span_grid
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

SERVED_CLASS = "BiEncoderSpanGLiNER"
LABEL_SETS_CACHED = 64  # SIE's cache size: distinct label sets whose embeddings are kept
# One label set: each label's token ids, in the request's (de-duplicated) order.
LabelSet = tuple[tuple[int, ...], ...]


class GlinerBiAdapter(Adapter):
    kinds = frozenset({ResultKind.TOKEN_SCORES})

    def __init__(self, gliner: Any, *, name: str) -> None:
        """`gliner`: a loaded `gliner.GLiNER` of the bi-encoder span kind."""
        kind = type(gliner).__name__
        if kind != SERVED_CLASS:
            raise ValueError(f"model '{name}': GLiNER variant {kind} not supported (only {SERVED_CLASS})")
        self.name = name
        self._model: torch.nn.Module | None = gliner.model
        parameter = next(gliner.model.parameters())
        self.device, self.dtype = parameter.device, parameter.dtype
        labels_config = gliner.model.token_rep_layer.labels_encoder.model.config
        self.pad_token_id = int(gliner.data_processor.transformer_tokenizer.pad_token_id or 0)
        # Label ids are padded here, under an attention mask: any id of the vocabulary does.
        self.labels_pad_id = int(getattr(labels_config, "pad_token_id", None) or 0)
        self.max_width = int(gliner.config.max_width)
        self.hidden_size = int(gliner.config.hidden_size)  # of the label embeddings, after projection
        self._label_sets: OrderedDict[LabelSet, torch.Tensor] = OrderedDict()
        self._memory_bytes = tensor_bytes(gliner.model)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> GlinerBiAdapter:
        from gliner import GLiNER  # deferred: imports transformers and a lot of gliner
        from transformers import AutoTokenizer

        torch_device = torch.device(device)
        dtype = compute_dtype(torch_device, config.profile(profile).compute_precision)
        # gliner builds a data processor that wants the labels tokenizer, which published models only
        # name by hub id. The device never tokenizes (the frontend does), so the text tokenizer,
        # which is in the folder, stands in for it and nothing is looked up on the hub.
        stand_in = AutoTokenizer.from_pretrained(str(weights_dir), local_files_only=True)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Resizing embeddings is not supported")
            gliner = GLiNER.from_pretrained(
                str(weights_dir),
                local_files_only=True,
                map_location=device,
                dtype=dtype,
                labels_tokenizer=stand_in,
            )
        place(gliner.model, torch_device)
        return cls(gliner, name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        if inputs.aux is None:
            raise ValueError(f"model '{self.name}': GLiNER-bi needs the words_mask aux the frontend sends")
        text_lengths = ((inputs.aux >= 0) & inputs.attention_mask.bool()).sum(dim=1)
        n_words = inputs.aux.amax(dim=1).clamp(min=0)
        label_sets = self.label_sets(inputs, text_lengths.tolist())
        logits = self.span_logits(inputs, text_lengths, n_words.tolist(), label_sets)
        n_labels = torch.tensor([len(s) for s in label_sets], device=logits.device)
        return {ResultKind.TOKEN_SCORES: self._ragged(logits, n_words, n_labels)}

    def label_sets(self, inputs: ForwardInputs, text_lengths: list[int]) -> list[LabelSet]:
        """Each item's labels as token ids, read from behind its text (aux -1, -2, ...)."""
        assert inputs.aux is not None
        ids, aux = inputs.input_ids.tolist(), inputs.aux.tolist()
        sets = []
        for row_ids, row_aux, start, end in zip(ids, aux, text_lengths, inputs.lengths, strict=True):
            pairs = zip(row_aux[start:end], row_ids[start:end], strict=True)
            groups = itertools.groupby(pairs, key=lambda pair: pair[0])
            sets.append(tuple(tuple(token for _, token in group) for _, group in groups))
        return sets

    def span_logits(
        self,
        inputs: ForwardInputs,
        text_lengths: torch.Tensor,
        n_words: list[int],
        label_sets: list[LabelSet],
    ) -> torch.Tensor:
        """[n, max words, max_width, max labels] logits, as gliner's forward returns them."""
        if self._model is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        device = inputs.input_ids.device
        width = int(text_lengths.max())
        text_mask = torch.arange(width, device=device)[None, :] < text_lengths[:, None]
        text_ids = torch.where(text_mask, inputs.input_ids[:, :width], self.pad_token_id)
        words_mask = inputs.aux[:, :width].clamp(min=0) if inputs.aux is not None else None
        labels, labels_mask = self.label_embeddings(label_sets)
        # gliner never runs a text without words; one dummy word (a zero vector) keeps such an item's
        # shapes valid and touches no other item, and its logits are dropped.
        lengths = [max(n, 1) for n in n_words]
        span_idx, span_mask = span_grid(lengths, self.max_width, device)
        with torch.inference_mode():
            output = self._model(
                input_ids=text_ids,
                attention_mask=text_mask.long(),
                labels_embeds=labels,
                prompts_embedding_mask=labels_mask,
                words_mask=words_mask,
                text_lengths=torch.tensor(lengths, device=device).unsqueeze(-1),
                span_idx=span_idx,
                span_mask=span_mask,
            )
        return output.logits

    def label_embeddings(self, label_sets: list[LabelSet]) -> tuple[torch.Tensor, torch.Tensor]:
        """[n, max labels, dim] embeddings of each item's label set (zeros past its labels), and the
        [n, max labels] mask of real labels."""
        embedded = [self._embedded(label_set) for label_set in label_sets]
        most = max(1, *(len(s) for s in label_sets))
        dim = embedded[0].shape[-1]
        labels = torch.zeros(len(label_sets), most, dim, dtype=embedded[0].dtype, device=self.device)
        mask = torch.zeros(len(label_sets), most, dtype=torch.long, device=self.device)
        for i, rows in enumerate(embedded):
            labels[i, : len(rows)] = rows
            mask[i, : len(rows)] = 1
        return labels, mask

    def _embedded(self, label_set: LabelSet) -> torch.Tensor:
        """A label set's embeddings from the cache, encoding it on a miss (least recently used out)."""
        cached = self._label_sets.get(label_set)
        if cached is not None:
            self._label_sets.move_to_end(label_set)
            return cached
        rows = self.encode_labels(label_set)
        self._label_sets[label_set] = rows
        while len(self._label_sets) > LABEL_SETS_CACHED:
            self._label_sets.popitem(last=False)
        return rows

    def encode_labels(self, label_set: LabelSet) -> torch.Tensor:
        """[n labels, dim]: each label through the labels encoder, mean-pooled (gliner's encode_labels)."""
        if self._model is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        if not label_set:
            return torch.zeros(0, self.hidden_size, dtype=self.dtype, device=self.device)
        longest = max(len(ids) for ids in label_set)
        ids = torch.full((len(label_set), longest), self.labels_pad_id, dtype=torch.long)
        mask = torch.zeros(len(label_set), longest, dtype=torch.long)
        for j, label_ids in enumerate(label_set):
            ids[j, : len(label_ids)] = torch.tensor(label_ids)
            mask[j, : len(label_ids)] = 1
        with torch.inference_mode():
            rows: torch.Tensor = self._model.token_rep_layer.encode_labels(
                ids.to(self.device), mask.to(self.device)
            )
        return rows

    def _ragged(self, logits: torch.Tensor, n_words: torch.Tensor, n_labels: torch.Tensor) -> Output:
        n, width, _, classes = logits.shape
        words_ok = torch.arange(width, device=logits.device)[None, :] < n_words[:, None]
        labels_ok = torch.arange(classes, device=logits.device)[None, :] < n_labels[:, None]
        keep = words_ok[:, :, None, None] & labels_ok[:, None, None, :]
        # Boolean indexing walks row-major: each item's kept logits come out in (word, width, label) order.
        values = logits[keep.expand_as(logits)].float().cpu().numpy().reshape(-1, 1)
        counts = (n_words * self.max_width * n_labels).cpu()
        offsets = torch.zeros(n + 1, dtype=torch.int64)
        torch.cumsum(counts, dim=0, out=offsets[1:])
        return Output(ResultKind.TOKEN_SCORES, values, offsets.numpy())

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._model is not None else 0

    def lora_target(self) -> torch.nn.Module | None:
        return self._model

    def close(self) -> None:
        self._model = None
        self._label_sets.clear()
        release(self.device)
