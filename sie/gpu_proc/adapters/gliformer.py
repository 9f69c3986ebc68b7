"""GLiFormer, device half: the package's own model forward for entities, and its text embedding.

The frontend builds the prompt (`[SEQ] [SCHEMA] "[ENTITY] label" ... [SEP] [SEP] words`) and sends
the package's words_mask as the per-token aux (see sie/frontend/gliformer.py). This adapter adds
what the package's collator would (word counts, the per-item label mapping, which only the label
count matters in) and runs the model's forward. Item i gets its NER logits `[n_words_i, n_labels_i,
3]` (start, end, inside) as rows of three; the frontend applies the sigmoid and decodes spans.
An encode runs the shared encoder over the plain text tokens and pools them as the package's
`embed_text` does (the embedding head's projection and pooling), unnormalized.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.common import HeldModel, compute_dtype, place, rows_output
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

_IMPORT_LOCK = threading.Lock()


class GliformerAdapter(HeldModel):
    kinds = frozenset({ResultKind.TOKEN_SCORES, ResultKind.DENSE})

    def __init__(self, gliformer: Any, *, name: str) -> None:
        """`gliformer`: a loaded text `gliformer.GLiFormer` with an NER head."""
        if getattr(gliformer.config, "ner_config", None) is None:
            raise ValueError(f"model '{name}': GLiFormer checkpoint has no NER head")
        super().__init__(gliformer.model, name=name)
        self._processor = gliformer.data_processor
        tokenizer = self._processor.transformer_tokenizer
        self.pad_token_id = int(tokenizer.pad_token_id or 0)
        self.ent_token_id = int(tokenizer.convert_tokens_to_ids(gliformer.config.ent_token))

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> GliformerAdapter:
        gliformer = import_gliformer()
        torch_device = torch.device(device)
        dtype = compute_dtype(torch_device, config.profile(profile).compute_precision)
        with warnings.catch_warnings():  # the package's advisory notices about marker tokens
            warnings.simplefilter("ignore", UserWarning)
            model = gliformer.GLiFormer.from_pretrained(
                str(weights_dir), local_files_only=True, load_tokenizer=True, map_location="cpu"
            )
        model.model.to(dtype=dtype)
        model.eval()
        place(model.model, torch_device)
        return cls(model, name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        model = self._live()
        if ResultKind.DENSE in wanted:
            return {ResultKind.DENSE: rows_output(ResultKind.DENSE, self._embed(model, inputs))}
        if inputs.aux is None:
            raise ValueError(f"model '{self.name}': GLiFormer needs the words_mask aux the frontend sends")
        n_words = inputs.aux.amax(dim=1)
        n_labels = ((inputs.input_ids == self.ent_token_id) & inputs.attention_mask.bool()).sum(dim=1)
        words, labels = n_words.tolist(), n_labels.tolist()
        with torch.inference_mode(), warnings.catch_warnings():
            # The package's Qwen3 backbone passes transformers a deprecated argument on every call.
            warnings.filterwarnings("ignore", message=".*past_key_values", category=FutureWarning)
            output = model(
                input_ids=inputs.input_ids,
                attention_mask=inputs.attention_mask,
                words_mask=inputs.aux,
                text_lengths=n_words.unsqueeze(-1),
                classes_mapping=self._classes_mapping(words, labels),
                tokens=[["w"] * n for n in words],  # only the counts are read at inference
                token_lengths=inputs.lengths,
                word_lengths=words,
            )
        logits = output.ner_logits.float()
        rows = [logits[i, : words[i], : labels[i]].reshape(-1, 3) for i in range(len(words))]
        counts = torch.tensor([row.shape[0] for row in rows], dtype=torch.int64)
        offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
        torch.cumsum(counts, dim=0, out=offsets[1:])
        values = torch.cat(rows).cpu().numpy()
        return {ResultKind.TOKEN_SCORES: Output(ResultKind.TOKEN_SCORES, values, offsets.numpy())}

    def _embed(self, model: Any, inputs: ForwardInputs) -> torch.Tensor:
        """Pooled float32 [n, dim], as `GLiFormer.embed_text` computes it."""
        head = getattr(model.heads, "embedding", None)
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*past_key_values", category=FutureWarning)
            tokens = model.encode_embedding_tokens(inputs.input_ids, inputs.attention_mask)
            if head is not None:
                return head.pooling(head._project(tokens), inputs.attention_mask).float()
            mask = inputs.attention_mask.unsqueeze(-1).float()  # the package's fallback: a mean
            return ((tokens.float() * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)).float()

    def _classes_mapping(self, words: list[int], labels: list[int]) -> Any:
        """The package's per-item label mapping; the names never reach the logits, only their count."""
        batch = [
            {"tokenized_text": ["w"] * n, "extraction": [{"name": None, "ner": [], "all_labels": _names(c)}]}
            for n, c in zip(words, labels, strict=True)
        ]
        return self._processor.batch_generate_class_mappings(batch)


def _names(count: int) -> list[str]:
    return [f"label{i}" for i in range(count)]


def import_gliformer() -> Any:
    """Import gliformer, then undo its AutoModel registration for transformers' own Qwen3 configs.

    The package makes its bidirectional Qwen3 the AutoModel of the built-in Qwen3Config process-wide;
    it builds its backbone through its own registry, so dropping that keeps other Qwen3 models intact.
    """
    from transformers.models.auto import modeling_auto

    with _IMPORT_LOCK:
        import gliformer

        mapping = modeling_auto.MODEL_MAPPING
        extra = getattr(mapping, "_extra_content", {})
        builtin = {name for name in getattr(mapping, "_reverse_config_mapping", {})}
        for config_class in [c for c, m in extra.items() if m.__module__.startswith("gliformer.")]:
            if config_class.__name__ in builtin:
                del extra[config_class]
    return gliformer
