"""LLM rerankers' prompts (family `llm_reranker`): each (query, document) pair as the token ids SIE's
adapters feed the causal LM, by the profile's `input_format`.

- "qwen3" (Qwen3-Reranker; SIE's Qwen2FlashCrossEncoderAdapter): the chat prefix, then
  `<Instruct>: {instruction}\\n<Query>: {query}\\n<Document>: `, the document, and the chat suffix
  with an empty think block. Each piece is tokenized on its own and the ids are joined, so the
  space before the document never merges into its first word. Only the document is truncated.
- "mxbai" (mxbai-rerank-v2; that adapter's default): the chat prefix, `query: {query}`, a newline,
  `document: {document}` (truncated), a newline, the task prompt and the chat suffix, joined alike.
- "native" (zerank-2; SIE's NativeCausalCrossEncoderAdapter): the publisher's chat template with the
  query as the system turn and the document as the user turn, tokenized whole. Never truncated: a
  row over the limit is refused, as SIE refuses it.

The prompt texts are SIE's, character for character: a model scores the prompt it was trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from sie.errors import InputTooLong, InvalidInput
from sie.families.llm_reranker import NATIVE_TEMPLATE
from sie.frontend.model_files import read_json_object
from sie.frontend.tokenize import Encoded, TextTokenizer
from sie.model_config import RuntimeOptions

InputFormat = Literal["mxbai", "qwen3", "native"]

QWEN3_SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query "
    'and the Instruct provided. Note that the answer can only be "yes" or "no".'
)
QWEN3_DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
QWEN3_PREFIX = f"<|im_start|>system\n{QWEN3_SYSTEM}<|im_end|>\n<|im_start|>user\n"
QWEN3_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
MXBAI_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
MXBAI_TASK_PROMPT = (
    "You are a search relevance expert who evaluates how well documents match "
    "search queries. For each query-document pair, carefully analyze the "
    "semantic relationship between them, then provide your binary relevance "
    "judgment (0 for not relevant, 1 for relevant).\nRelevance:"
)
MXBAI_PREFIX = f"<|im_start|>system\n{MXBAI_SYSTEM}<|im_end|>\n<|im_start|>user\n"
MXBAI_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"
# SIE's limits when neither the YAML nor the model says: the flash adapter's, the native one's context.
DEFAULT_LIMIT = 8192
NATIVE_CONTEXT = 32768
# transformers' `model_max_length` when tokenizer_config.json sets none (SIE ignores values above it).
_NO_TOKENIZER_LIMIT = int(1e29)


class LlmPrompts:
    """One model profile's prompt pieces, tokenized once, and the rows built from them per request."""

    def __init__(
        self,
        tokenizer: TextTokenizer,
        input_format: InputFormat,
        ceiling: int,
        default_instruction: str | None = None,
    ) -> None:
        self.input_format = input_format
        self.ceiling = ceiling  # the longest row a request may ask for
        self._tokenizer = tokenizer
        self._default_instruction = default_instruction or QWEN3_DEFAULT_INSTRUCTION
        qwen3 = input_format == "qwen3"
        prefix, suffix = (QWEN3_PREFIX, QWEN3_SUFFIX) if qwen3 else (MXBAI_PREFIX, MXBAI_SUFFIX)
        pieces = self._ids([prefix, suffix, "\n", MXBAI_TASK_PROMPT])
        self._prefix, self._suffix, self._newline, self._task = pieces

    @classmethod
    def for_profile(
        cls, tokenizer: TextTokenizer, runtime: RuntimeOptions, folder: Path, declared: int | None
    ) -> LlmPrompts:
        """The profile's recipe, its limit from the YAML (`runtime.max_seq_length`, else the model's
        `max_sequence_length`) capped, as SIE caps it, by what the tokenizer and positions allow."""
        input_format: InputFormat = runtime.input_format or "mxbai"
        wanted = runtime.max_seq_length or declared
        instruction = runtime.instruction or runtime.default_instruction
        if input_format == "native":
            return cls(tokenizer, input_format, min(wanted or NATIVE_CONTEXT, NATIVE_CONTEXT))
        ceiling = min([wanted or DEFAULT_LIMIT, *model_caps(folder)])
        return cls(tokenizer, input_format, ceiling, instruction)

    def limit(self, requested: int | None) -> int:
        """The row limit of a request: its `options.max_seq_length`, at most the profile's."""
        if requested is None:
            return self.ceiling
        if isinstance(requested, bool) or not isinstance(requested, int) or requested <= 0:
            raise InvalidInput("options.max_seq_length must be a positive integer")
        if self.input_format == "native" and requested > self.ceiling:
            raise InvalidInput(f"options.max_seq_length must be an integer from 1 to {self.ceiling}")
        return min(requested, self.ceiling)

    def encode(self, query: str, documents: Sequence[str], instruction: str | None, limit: int) -> Encoded:
        """Every (query, document) row, flat, in document order."""
        if self.input_format == "native":
            if instruction is not None:
                raise InvalidInput("this reranker takes its conditions in the query, not in an instruction")
            return Encoded.from_rows(self._native_rows(query, documents, limit))
        for text in (query, *documents):
            if not text.strip():
                raise InvalidInput("LLM rerankers require non-empty query and document texts")
        if self.input_format == "qwen3":
            return Encoded.from_rows(
                self._qwen3_rows(query, documents, instruction or self._default_instruction, limit)
            )
        return Encoded.from_rows(self._mxbai_rows(query, documents, limit))

    def _qwen3_rows(
        self, query: str, documents: Sequence[str], instruction: str, limit: int
    ) -> list[list[int]]:
        (user,) = self._ids([f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: "])
        head = self._prefix + user
        keep = _document_budget(limit, len(head) + len(self._suffix), "instruction, query, and template")
        return [head + doc + self._suffix for doc in self._ids(documents, keep)]

    def _mxbai_rows(self, query: str, documents: Sequence[str], limit: int) -> list[list[int]]:
        (asked,) = self._ids([f"query: {query}"])
        head = self._prefix + asked + self._newline
        tail = self._newline + self._task + self._suffix
        keep = _document_budget(limit, len(head) + len(tail), "query and template")
        docs = self._ids([f"document: {doc}" for doc in documents], keep)
        return [head + doc + tail for doc in docs]

    def _native_rows(self, query: str, documents: Sequence[str], limit: int) -> list[list[int]]:
        texts = [NATIVE_TEMPLATE.format(query=query, document=doc) for doc in documents]
        # One token past the limit tells a row is too long without tokenizing all of it.
        rows = self._ids(texts, limit + 1)
        if any(len(row) > limit for row in rows):
            raise InputTooLong(
                f"The reranker's complete input exceeds the {limit}-token context, including template tokens"
            )
        return rows

    def _ids(self, texts: Sequence[str], keep: int | None = None) -> list[list[int]]:
        return self._tokenizer.head_ids(texts, keep if keep is not None else 2**62)


def _document_budget(limit: int, around: int, what: str) -> int:
    """How many document tokens fit beside the `around` tokens SIE never truncates."""
    if around > limit:
        raise InvalidInput(
            f"max_seq_length={limit} is too small for the reranker {what} "
            f"({around} tokens besides the document)"
        )
    return limit - around


def model_caps(folder: Path) -> list[int]:
    """The limits the model's files set: the tokenizer's `model_max_length`, the position table."""
    caps = []
    tokenizer_max = read_json_object(folder / "tokenizer_config.json").get("model_max_length")
    if isinstance(tokenizer_max, int) and 0 < tokenizer_max < _NO_TOKENIZER_LIMIT:
        caps.append(tokenizer_max)
    positions = read_json_object(folder / "config.json").get("max_position_embeddings")
    if isinstance(positions, int) and positions > 0:
        caps.append(positions)
    return caps
