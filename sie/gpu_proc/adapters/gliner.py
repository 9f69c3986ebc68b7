"""GLiNER zero-shot span extraction (uni-encoder span models), run through the `gliner` package.

The frontend builds the prompt (`<<ENT>> label ... <<SEP>> words`), splits the words and sends
gliner's words_mask as the per-token aux (see sie/frontend/gliner.py). This adapter adds what
gliner's collator would (word counts, the grid of candidate spans) and calls the model's own
forward. Item i gets its raw span logits `[n_words_i, max_width, n_labels_i]` flattened into rows of
one value, so the frontend, which knows both counts, reshapes them; it also applies the sigmoid.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.common import compute_dtype, place, release, tensor_bytes
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

SERVED_CLASS = "UniEncoderSpanGLiNER"


class GlinerAdapter(Adapter):
    kinds = frozenset({ResultKind.TOKEN_SCORES})
    served_class = SERVED_CLASS

    def __init__(self, gliner: Any, *, name: str) -> None:
        """`gliner`: a loaded `gliner.GLiNER` of the uni-encoder span kind."""
        kind = type(gliner).__name__
        if kind != self.served_class:
            raise ValueError(
                f"model '{name}': GLiNER variant {kind} not supported here (only {self.served_class})"
            )
        tokenizer = gliner.data_processor.transformer_tokenizer
        self.name = name
        self._model: torch.nn.Module | None = gliner.model  # the torch module; `gliner` wraps it
        parameter = next(gliner.model.parameters())
        self.device, self.dtype = parameter.device, parameter.dtype
        self.pad_token_id = int(tokenizer.pad_token_id or 0)
        self.max_width = int(gliner.config.max_width)
        self.ent_token_id = int(gliner.config.class_token_index)
        self._memory_bytes = tensor_bytes(gliner.model)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> GlinerAdapter:
        from gliner import GLiNER  # deferred: imports transformers and a lot of gliner

        torch_device = torch.device(device)
        dtype = compute_dtype(torch_device, config.profile(profile).compute_precision)
        # A local folder is read as is (no hub lookup); gliner casts the weights while reading them.
        gliner = GLiNER.from_pretrained(
            str(weights_dir), local_files_only=True, map_location=device, dtype=dtype
        )
        place(gliner.model, torch_device)
        if getattr(gliner.config, "relations_layer", None) is not None:  # joint entities and relations
            from sie.gpu_proc.adapters.gliner_relex import GlinerRelexAdapter

            return GlinerRelexAdapter(gliner, name=config.sie_id)
        return cls(gliner, name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        if inputs.aux is None:
            raise ValueError(f"model '{self.name}': GLiNER needs the words_mask aux the frontend sends")
        n_words = inputs.aux.amax(dim=1)
        n_labels = self.label_counts(inputs.input_ids, inputs.attention_mask)
        logits = self.span_logits(inputs, n_words.tolist())
        return {ResultKind.TOKEN_SCORES: self._ragged(logits, n_words, n_labels)}

    def label_counts(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """<<ENT>> tokens per item: one per label (the word splitter cuts a typed "<<ENT>>" apart)."""
        return ((input_ids == self.ent_token_id) & attention_mask.bool()).sum(dim=1)

    def span_logits(self, inputs: ForwardInputs, n_words: list[int]) -> torch.Tensor:
        """[n, max words, max_width, max labels] logits, as gliner's forward returns them."""
        return self.run_model(inputs, n_words).logits

    def run_model(self, inputs: ForwardInputs, n_words: list[int], **extra: Any) -> Any:
        """gliner's own forward over the candidate span grid; `extra` goes to it as is."""
        if self._model is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        # gliner never runs a text without words; one dummy word (a zero vector) keeps such an item's
        # shapes valid and touches no other item, and its logits are dropped.
        lengths = [max(n, 1) for n in n_words]
        span_idx, span_mask = span_grid(lengths, self.max_width, inputs.input_ids.device)
        with torch.inference_mode():
            return self._model(
                input_ids=inputs.input_ids,
                attention_mask=inputs.attention_mask,
                words_mask=inputs.aux,
                text_lengths=torch.tensor(lengths, device=inputs.input_ids.device).unsqueeze(-1),
                span_idx=span_idx,
                span_mask=span_mask,
                word_lengths=lengths,  # host-side copy: spares the LSTM a device sync
                **extra,
            )

    def _ragged(self, logits: torch.Tensor, n_words: torch.Tensor, n_labels: torch.Tensor) -> Output:
        values, counts = self.item_logits(logits, n_words, n_labels)
        offsets = torch.zeros(len(counts) + 1, dtype=torch.int64)
        torch.cumsum(counts, dim=0, out=offsets[1:])
        return Output(ResultKind.TOKEN_SCORES, values, offsets.numpy())

    def item_logits(
        self, logits: torch.Tensor, n_words: torch.Tensor, n_labels: torch.Tensor
    ) -> tuple[np.ndarray, torch.Tensor]:
        """Every item's real logits, items one after the other, and how many each has."""
        _, width, _, classes = logits.shape
        words_ok = torch.arange(width, device=logits.device)[None, :] < n_words[:, None]
        labels_ok = torch.arange(classes, device=logits.device)[None, :] < n_labels[:, None]
        keep = words_ok[:, :, None, None] & labels_ok[:, None, None, :]
        # Boolean indexing walks row-major, so each item's kept logits come out in (word, width, label) order.
        values = logits[keep.expand_as(logits)].float().cpu().numpy().reshape(-1, 1)
        return values, (n_words * self.max_width * n_labels).cpu()

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._model is not None else 0

    def lora_target(self) -> torch.nn.Module | None:
        return self._model

    def close(self) -> None:
        self._model = None
        release(self.device)


def span_grid(n_words: list[int], max_width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """gliner's candidate spans: (start, end) words for every start and width, and which fit the text.

    Returns span_idx int64 [n, W * max_width, 2] and span_mask bool [n, W * max_width], W the most
    words of any item. Spans past an item's words are masked (the model zeroes their indices).
    """
    width = max(n_words)
    starts = torch.arange(width, device=device).repeat_interleave(max_width)
    ends = starts + torch.arange(max_width, device=device).repeat(width)
    span_idx = torch.stack([starts, ends], dim=-1).expand(len(n_words), -1, -1)
    span_mask = ends[None, :] < torch.tensor(n_words, device=device)[:, None]
    return span_idx, span_mask
