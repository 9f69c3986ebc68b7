"""Qwen3-VL embedders and rerankers: one chat prompt per item, its images read beside it.

The frontend (sie.frontend.qwen3_vl) sends each item's prompt ids with every image's placeholder
already expanded to one `<|image_pad|>` per merged patch, `aux` holding on those tokens the image's
patch-grid width, and the images' resized RGB bytes in the request's sample section (4 bytes per
float32 word; each image has its own size, which the fixed pixel section cannot carry). Here the
bytes are normalized and cut into patches in the processor's order, and `Qwen3VLModel` runs the
prompts with their images. A batch is cut into runs of at most the profile's token budget, since
the batcher counts an item with images as one.

- embedding (SIE's Qwen3VLEmbeddingAdapter): the profile's pooling (last token) of the final hidden
  states; the frontend normalizes.
- reranker (SIE's Qwen3VLRerankerAdapter): the last token's logits of "no" and "yes", from only those
  two rows of the LM head (kept in float32; an untied head is dropped); the frontend takes
  sigmoid(yes - no).

At load, the folder's chat template (when it has one) must render SIE's conversations as the
frontend writes them (sie.qwen3_vl), so a checkpoint with another template is refused, not served
wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sie import qwen3_vl as recipe
from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.common import HeldModel, load_model, rows_output
from sie.gpu_proc.adapters.pooling import Pooling, last_token_pool, pool
from sie.gpu_proc.adapters.qwen_patches import flat_patches
from sie.gpu_proc.outputs import Output
from sie.model_location import resolve_tokenizer_file
from sie.shm.layout import ResultKind
from sie.tokenizer_files import chat_template

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig


class Qwen3VLForward(HeldModel):
    """The shared part: a `Qwen3VLModel` run on prompts whose images travel as bytes."""

    def __init__(self, model: PreTrainedModel, spec: recipe.VisionSpec, *, name: str, budget: int) -> None:
        super().__init__(model, name=name)
        config = model.config
        self.pad_token_id = int(getattr(config.get_text_config(), "pad_token_id", None) or 0)
        self.image_token_id = int(config.image_token_id)
        self._spec = spec
        self._budget = budget
        self._mean = torch.tensor(spec.mean, dtype=torch.float32, device=self.device).view(3, 1, 1)
        self._std = torch.tensor(spec.std, dtype=torch.float32, device=self.device).view(3, 1, 1)

    def lora_target(self) -> torch.nn.Module | None:
        return None  # the family takes no LoRA adapters

    def hidden_runs(self, inputs: ForwardInputs) -> list[tuple[slice, torch.Tensor]]:
        """Final hidden states [rows, L, d] of consecutive item runs within the token budget."""
        return [(rows, self._hidden(inputs, rows)) for rows in self._runs(inputs)]

    def _runs(self, inputs: ForwardInputs) -> list[slice]:
        n, length = inputs.input_ids.shape
        if inputs.samples is None:  # text: the runner has already kept padding and size in bounds
            return [slice(0, n)]
        per_run = max(1, self._budget // max(1, length))
        return [slice(start, min(n, start + per_run)) for start in range(0, n, per_run)]

    def _hidden(self, inputs: ForwardInputs, rows: slice) -> torch.Tensor:
        ids, mask = inputs.input_ids[rows], inputs.attention_mask[rows]
        extra: dict[str, Any] = {}
        if inputs.samples is not None:
            extra["pixel_values"], extra["image_grid_thw"] = self._images(inputs, rows)
            extra["mm_token_type_ids"] = (ids == self.image_token_id).to(torch.int32)
        with torch.inference_mode():
            output = self._live()(input_ids=ids, attention_mask=mask, use_cache=False, **extra)
        hidden: torch.Tensor = output.last_hidden_state
        return hidden

    def _images(self, inputs: ForwardInputs, rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
        """The run's images as the processor's flat patches and their (1, h, w) patch grids."""
        if inputs.samples is None or inputs.aux is None:
            raise ValueError("image prompts need their bytes and their grid widths in aux")
        patches, grids = [], []
        host_ids, host_aux = inputs.input_ids[rows].cpu().numpy(), inputs.aux[rows].cpu().numpy()
        for i, (sample, length) in enumerate(zip(inputs.samples[rows], inputs.lengths[rows], strict=True)):
            data = sample.contiguous().view(torch.uint8)
            used = 0
            for start, count in _image_runs(host_ids[i, :length], self.image_token_id):
                grid_h, grid_w = self._grid(count, int(host_aux[i, start]))
                height, width = grid_h * self._spec.patch_size, grid_w * self._spec.patch_size
                size = height * width * 3
                if used + size > len(data):
                    raise ValueError("an item's image bytes are shorter than its prompt's images")
                pixels = data[used : used + size].to(self.device, non_blocking=True).view(height, width, 3)
                patches.append(self._patches(pixels))
                grids.append((1, grid_h, grid_w))
                used += size
            if len(data) - used >= 4:  # the frontend pads to whole float32 words, no more
                raise ValueError("an item's image bytes do not match its prompt's images")
        if not grids:
            raise ValueError("a media item carries no image")
        grid = torch.tensor(grids, dtype=torch.int64, device=self.device)
        return torch.cat(patches).to(self.dtype), grid

    def _grid(self, tokens: int, grid_w: int) -> tuple[int, int]:
        merge = self._spec.merge_size
        grid_h = tokens * merge * merge // max(1, grid_w)
        if grid_w <= 0 or grid_w % merge or grid_h % merge or grid_h * grid_w != tokens * merge * merge:
            raise ValueError(f"an image of {tokens} tokens cannot be {grid_w} patches wide")
        return grid_h, grid_w

    def _patches(self, pixels: torch.Tensor) -> torch.Tensor:
        """[H, W, 3] uint8 -> [h * w, 3 * t * p * p] float32, in Qwen2VLImageProcessor's order."""
        spec = self._spec
        p, m, t = spec.patch_size, spec.merge_size, spec.temporal_patch_size
        values = pixels.permute(2, 0, 1).to(torch.float32).mul_(spec.rescale_factor)
        values = values.sub_(self._mean).div_(self._std)
        return flat_patches(values.unsqueeze(0), p, m, t)


class Qwen3VLEmbeddingAdapter(Qwen3VLForward):
    kinds = frozenset({ResultKind.DENSE})

    def __init__(
        self, model: PreTrainedModel, spec: recipe.VisionSpec, *, name: str, budget: int, pooling: Pooling
    ) -> None:
        super().__init__(model, spec, name=name, budget=budget)
        self.pooling: Pooling = pooling

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> Qwen3VLEmbeddingAdapter:
        from transformers import Qwen3VLModel  # deferred: importing transformers is slow

        instruction = recipe.EMBED_DEFAULT_INSTRUCTION
        shapes = ((2, "Query\n東京"), (0, "text only"))
        check_chat_template(
            weights_dir,
            [
                (
                    recipe.embedding_conversation(instruction, n, text),
                    recipe.embedding_prompt(instruction, n, text)[0],
                )
                for n, text in shapes
            ],
        )
        model = load_model(Qwen3VLModel, config, weights_dir, device, profile)
        chosen = config.profile(profile)
        pooling = chosen.adapter_options.runtime.pooling
        spec = recipe.vision_spec(weights_dir)
        return cls(model, spec, name=config.sie_id, budget=chosen.max_batch_tokens, pooling=pooling)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        pooled = [
            pool(hidden, inputs.attention_mask[rows], self.pooling)
            for rows, hidden in self.hidden_runs(inputs)
        ]
        return {ResultKind.DENSE: rows_output(ResultKind.DENSE, torch.cat(pooled))}


class Qwen3VLRerankerAdapter(Qwen3VLForward):
    kinds = frozenset({ResultKind.SCORES})

    def __init__(
        self,
        model: PreTrainedModel,
        spec: recipe.VisionSpec,
        head_rows: torch.Tensor,
        *,
        name: str,
        budget: int,
    ) -> None:
        super().__init__(model, spec, name=name, budget=budget)
        self._rows = head_rows  # float32 [2, d]: the LM head's "no" and "yes" rows

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> Qwen3VLRerankerAdapter:
        from tokenizers import Tokenizer
        from transformers import Qwen3VLForConditionalGeneration  # deferred: importing transformers is slow

        instruction = recipe.RERANK_DEFAULT_INSTRUCTION
        pairs = (("Query\n東京", True, "Document\nsource-tail-✓", True), ("q", False, None, True))
        check_chat_template(
            weights_dir,
            [
                (
                    recipe.reranker_conversation(instruction, *pair),
                    recipe.reranker_prompt(instruction, *pair)[0],
                )
                for pair in pairs
            ],
        )
        tokenizer = Tokenizer.from_file(str(resolve_tokenizer_file(config)))
        ids = [tokenizer.token_to_id(token) for token in ("no", "yes")]
        if None in ids:
            raise ValueError(f"{weights_dir}: the tokenizer has no 'yes' / 'no' token to score with")
        full = load_model(Qwen3VLForConditionalGeneration, config, weights_dir, device, profile)
        head = full.get_output_embeddings()
        rows = head.weight.detach().index_select(0, torch.tensor(ids, device=head.weight.device)).float()
        spec = recipe.vision_spec(weights_dir)
        budget = config.profile(profile).max_batch_tokens
        return cls(full.model, spec, rows.clone(), name=config.sie_id, budget=budget)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        last = [
            last_token_pool(hidden, inputs.attention_mask[rows]) for rows, hidden in self.hidden_runs(inputs)
        ]
        with torch.inference_mode():
            logits = torch.nn.functional.linear(torch.cat(last), self._rows)
        return {ResultKind.SCORES: rows_output(ResultKind.SCORES, logits)}


def _image_runs(ids: np.ndarray, image_token_id: int) -> list[tuple[int, int]]:
    """(start, length) of each run of image placeholders, in prompt order."""
    is_pad = ids == image_token_id
    starts = np.flatnonzero(is_pad & ~np.concatenate(([False], is_pad[:-1])))
    ends = np.flatnonzero(is_pad & ~np.concatenate((is_pad[1:], [False]))) + 1
    return [(int(s), int(e - s)) for s, e in zip(starts, ends, strict=True)]


def check_chat_template(weights_dir: Path, probes: list[tuple[list[dict[str, Any]], str]]) -> None:
    """Each probe conversation renders, with the folder's chat template, as the prompt beside it.
    A folder without a template gets Qwen3-VL's base one, which is the format the frontend writes."""
    template = chat_template(weights_dir)
    if template is None:
        return
    from transformers.utils.chat_template_utils import render_jinja_template

    for conversation, want in probes:
        rendered = render_jinja_template([conversation], chat_template=template, add_generation_prompt=True)[
            0
        ][0]
        if rendered != want:
            raise ValueError(
                f"{weights_dir}: the chat template renders SIE's Qwen3-VL prompt differently "
                f"({rendered!r} instead of {want!r})"
            )
