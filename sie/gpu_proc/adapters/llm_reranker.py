"""LLM rerankers: a causal LM reads each (query, document) prompt, built by the frontend
(sie.frontend.llm_prompts), and the score comes from its next-token logits after the prompt.

Only two rows of the LM head matter, so they are kept in float32 and an untied head is dropped: the
base model's last hidden state at each item's last real token times those rows is the full
projection's two logits, without the vocabulary-wide matmul. Scores follow SIE's adapters:

- Qwen2FlashCrossEncoderAdapter: loadtime `yes_token` / `no_token` (default "1" / "0") are texts
  whose first token id is read; `score_mode` "logit_diff" (yes - no, the default) or
  "log_softmax" (the probability of yes in a softmax over [no, yes]).
- NativeCausalCrossEncoderAdapter (runtime `input_format: native`): the folder's saved
  sentence-transformers stack names the tokens, Transformer then LogitScore: logit[true], minus
  logit[false] when it names one. The chat template must render the layout the frontend builds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from sie.families.llm_reranker import NATIVE_TEMPLATE
from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.common import BaseEncoder, load_model, release, rows_output, tensor_bytes
from sie.gpu_proc.adapters.pooling import last_token_pool
from sie.gpu_proc.outputs import Output
from sie.model_location import resolve_tokenizer_file
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig

ScoreMode = Literal["logit_diff", "log_softmax", "logit"]
_SCORE_MODES = ("logit_diff", "log_softmax")  # the ones a YAML may name; "logit" is LogitScore's
_SAVED_MODULES = (
    "sentence_transformers.base.modules.transformer.Transformer",
    "sentence_transformers.cross_encoder.modules.logit_score.LogitScore",
)


@dataclass(frozen=True, slots=True)
class Scorer:
    """Which next-token logits make the score, and how."""

    yes_id: int
    no_id: int | None  # None: the yes logit alone ("logit")
    mode: ScoreMode

    @property
    def token_ids(self) -> list[int]:
        return [self.yes_id] if self.no_id is None else [self.no_id, self.yes_id]

    def score(self, logits: torch.Tensor) -> torch.Tensor:
        """float32 [n] scores from float32 [n, len(token_ids)] logits."""
        if self.mode == "logit":
            return logits[:, 0]
        no, yes = logits[:, 0], logits[:, 1]
        if self.mode == "log_softmax":
            return torch.log_softmax(logits, dim=-1)[:, 1].exp()
        return yes - no


class LlmRerankerAdapter(Adapter):
    kinds = frozenset({ResultKind.SCORES})

    def __init__(self, model: PreTrainedModel, scorer: Scorer, *, name: str) -> None:
        self.name = name
        self.device = model.device
        self.dtype = model.dtype
        self.pad_token_id = int(getattr(model.config, "pad_token_id", None) or 0)
        self.scorer = scorer
        head = model.get_output_embeddings()
        ids = torch.tensor(scorer.token_ids, device=model.device)
        self._rows = head.weight.detach().index_select(0, ids).float()
        bias = getattr(head, "bias", None)
        self._bias = None if bias is None else bias.detach().index_select(0, ids).float()
        if head.weight is not model.get_input_embeddings().weight:
            model.lm_head = torch.nn.Identity()  # an untied head is vocabulary x hidden nobody reads
        self._model: PreTrainedModel | None = model
        self._encoder: BaseEncoder | None = BaseEncoder(model.base_model)
        self.is_padding_free = self._encoder.is_padding_free
        self._memory_bytes = tensor_bytes(model)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> LlmRerankerAdapter:
        from transformers import AutoModelForCausalLM  # deferred: slow import

        options = config.profile(profile).adapter_options
        if options.runtime.input_format == "native":
            scorer = saved_scorer(weights_dir)
            check_chat_template(weights_dir)
        else:
            scorer = token_scorer(resolve_tokenizer_file(config), options.loadtime)
        model = load_model(AutoModelForCausalLM, config, weights_dir, device, profile)
        model.config.use_cache = False  # one forward per prompt: a KV cache would be built and dropped
        return cls(model, scorer, name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        """One float32 score per item, from the logits after its last real token."""
        if self._encoder is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        hidden = self._encoder.hidden_states(inputs)
        with torch.inference_mode():
            last = last_token_pool(hidden, inputs.attention_mask)
            logits = torch.nn.functional.linear(last, self._rows, self._bias)
            scores = self.scorer.score(logits)
        return {ResultKind.SCORES: rows_output(ResultKind.SCORES, scores)}

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._model is not None else 0

    def lora_target(self) -> torch.nn.Module | None:
        return self._model

    def close(self) -> None:
        self._model = None
        self._encoder = None  # it holds the model's modules too
        release(self.device)


def token_scorer(tokenizer_json: Path, loadtime: Mapping[str, Any]) -> Scorer:
    """SIE's flash adapter: each token text's first id, as its tokenizer encodes it alone."""
    from tokenizers import Tokenizer

    mode = loadtime.get("score_mode", "logit_diff")
    if mode not in _SCORE_MODES:
        raise ValueError(f"score_mode {mode!r} is not one of {', '.join(_SCORE_MODES)}")
    tokenizer = Tokenizer.from_file(str(tokenizer_json))

    def first_id(text: Any) -> int:
        ids = tokenizer.encode(str(text), add_special_tokens=False).ids
        if not ids:
            raise ValueError(f"score token {text!r} encodes to no token")
        return int(ids[0])

    return Scorer(first_id(loadtime.get("yes_token", "1")), first_id(loadtime.get("no_token", "0")), mode)


def saved_scorer(weights_dir: Path) -> Scorer:
    """The token ids of the folder's saved LogitScore module, which must follow its Transformer."""
    try:
        modules = json.loads((weights_dir / "modules.json").read_text())
        types = tuple(module["type"] for module in modules)
        score_dir = weights_dir / modules[1]["path"]
        saved = json.loads((score_dir / "config.json").read_text())
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"{weights_dir}: input_format native needs a saved LogitScore: {exc}") from None
    if types != _SAVED_MODULES:
        raise ValueError(f"{weights_dir}: input_format native needs modules {_SAVED_MODULES}, found {types}")
    true_id, false_id = saved.get("true_token_id"), saved.get("false_token_id")
    if not isinstance(true_id, int) or not (false_id is None or isinstance(false_id, int)):
        raise ValueError(f"{score_dir}: LogitScore token ids must be integers, found {saved}")
    return Scorer(true_id, false_id, "logit" if false_id is None else "logit_diff")


def check_chat_template(weights_dir: Path) -> None:
    """The checkpoint's chat template renders query and document turns as the frontend writes them
    (SIE's own probe: text on both sides of a newline, non-ASCII included)."""
    from transformers import AutoTokenizer

    query, document = "Query\n東京", "Document\nsource-tail-✓"
    tokenizer = AutoTokenizer.from_pretrained(weights_dir, local_files_only=True)
    rendered = tokenizer.apply_chat_template(
        [{"role": "query", "content": query}, {"role": "document", "content": document}],
        tokenize=False,
        add_generation_prompt=True,
    )
    if rendered != NATIVE_TEMPLATE.format(query=query, document=document):
        raise ValueError(f"{weights_dir}: the chat template does not render the query/document layout")
