"""Tiny random-weight causal LMs (Qwen3, Qwen2) scored as LLM rerankers, with a small byte-level BPE
tokenizer trained here that carries Qwen's chat tokens.

The tokenizer is trained on a fixed corpus, so it is the same on every run: `yes`, `no`, the
chat-template words and the test texts' words are whole tokens, and a word after a space is one
token with the space (`Ġcats`), which is what makes the way SIE joins separately tokenized pieces
observable (`<Document>: cats` tokenized whole would differ from its two halves joined).
`native=True` adds what zerank-2's folder has: a chat template with `query`/`document` roles and a
sentence-transformers CrossEncoder stack whose LogitScore reads one token's logit.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from tests.tiny_models.bpe import byte_level_bpe

MAX_SEQUENCE_LENGTH = 256
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TRUE_TOKEN = "yes"  # the native stack's LogitScore token
_CORPUS_WORDS = (
    "yes no system user assistant Judge whether the Document meets requirements based on Query and "
    "Instruct provided Note that answer can only be You are Qwen created by Alibaba Cloud helpful "
    "search relevance expert who evaluates how well documents match queries For each query document "
    "pair carefully analyze semantic relationship between them then provide your binary judgment for "
    "not relevant Relevance Given web retrieve passages answers think cats sleep hours day dogs long "
    "do how stock market closed higher Friday Python programming language kittens older adults ears "
    "sounds protein cell gene cancer patients study results treatment risk mice expression levels"
)
_CORPUS = [
    _CORPUS_WORDS,
    "<Instruct>: <Query>: <Document>: query: document: 0 1 yes no <think>\n\n</think>\n\n",
    *(" ".join(_CORPUS_WORDS.split()[i::5]) for i in range(5)),
]
_NATIVE_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message.role == 'query' -%}{{ '<|im_start|>system\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'document' -%}{{ '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- else -%}{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)
COMMON: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,  # grouped-query attention, as the real models have
    "max_position_embeddings": MAX_SEQUENCE_LENGTH,
    # Wider than the usual 0.02, so the yes/no logits depend clearly on the text.
    "initializer_range": 0.2,
}


def make_llm_reranker(folder: Path, seed: int = 0, *, arch: str = "qwen3", native: bool = False) -> Path:
    """Write a tiny `arch` causal LM and its tokenizer into `folder` (native: as a CrossEncoder)."""
    if native:
        with tempfile.TemporaryDirectory() as base:
            make_llm_reranker(Path(base), seed, arch=arch)
            write_tokenizer(Path(base), native=True)
            _save_cross_encoder(Path(base), folder)
        return folder
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(folder)
    vocab = tokenizer.get_vocab_size()
    special = {"bos_token_id": None, "eos_token_id": tokenizer.token_to_id("<|im_end|>"), "pad_token_id": 0}
    if arch == "qwen3":
        config: Any = transformers.Qwen3Config(**{"head_dim": 16, **COMMON}, vocab_size=vocab, **special)
    elif arch == "qwen2":
        # Untied: the LM head is its own matrix (Qwen3-Reranker-4B's and mxbai-large's layout).
        config = transformers.Qwen2Config(**COMMON, vocab_size=vocab, tie_word_embeddings=False, **special)
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def _save_cross_encoder(base: Path, folder: Path) -> None:
    """zerank-2's layout, saved by sentence-transformers itself: a text-generation Transformer that
    applies the chat template, then LogitScore on one token's logit, no activation."""
    import warnings

    import torch
    from sentence_transformers import CrossEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.cross_encoder.modules import LogitScore

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformer = Transformer(
            str(base),
            transformer_task="text-generation",
            processing_kwargs={"chat_template": {"add_generation_prompt": True}},
        )
        true_id = transformer.tokenizer.convert_tokens_to_ids(TRUE_TOKEN)
        model = CrossEncoder(modules=[transformer, LogitScore(true_token_id=true_id)], device="cpu")
        model.activation_fn = torch.nn.Identity()
        model.save(str(folder))


def write_tokenizer(folder: Path, *, native: bool = False) -> Any:
    """Train the byte-level BPE tokenizer and save tokenizer.json and tokenizer_config.json."""
    tokenizer = byte_level_bpe(_CORPUS, SPECIAL_TOKENS, vocab_size=600)
    tokenizer.save(str(folder / "tokenizer.json"))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MAX_SEQUENCE_LENGTH,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "padding_side": "left" if native else "right",
        "model_input_names": ["input_ids", "attention_mask"],
    }
    if native:
        config["chat_template"] = _NATIVE_TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return tokenizer


def model_yaml_llm_reranker(
    sie_id: str, folder: Path, *, input_format: str = "qwen3", **loadtime: Any
) -> dict[str, Any]:
    """Our YAML for the tiny model: the prompt recipe at runtime, the score tokens at load."""
    runtime: dict[str, Any] = {"input_format": input_format}
    if input_format == "qwen3":
        loadtime = {"yes_token": "yes", "no_token": "no", "score_mode": "log_softmax", **loadtime}
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"score": {}},
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "profiles": {
            "default": {
                "adapter": "llm_reranker",
                "adapter_options": {"loadtime": loadtime, "runtime": runtime},
            }
        },
    }


# SIE's prompt texts, restated from its adapter (sie_server.adapters.qwen2_flash_cross_encoder), so
# a slip in ours cannot hide in the reference.
_QWEN3_SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query "
    'and the Instruct provided. Note that the answer can only be "yes" or "no".'
)
SIE_QWEN3_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
_MXBAI_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
_MXBAI_TASK = (
    "You are a search relevance expert who evaluates how well documents match "
    "search queries. For each query-document pair, carefully analyze the "
    "semantic relationship between them, then provide your binary relevance "
    "judgment (0 for not relevant, 1 for relevant).\nRelevance:"
)


def sie_rows(
    folder: Path,
    input_format: str,
    query: str,
    documents: list[str],
    *,
    max_length: int,
    instruction: str | None = None,
    default_instruction: str | None = None,
) -> list[list[int]]:
    """SIE's recipe, through transformers' tokenizer: pieces encoded apart and joined (qwen3,
    mxbai; only the document truncated), or the checkpoint's own chat template (native)."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))

    def enc(text: str) -> list[int]:
        ids: list[int] = tokenizer.encode(text, add_special_tokens=False)
        return ids

    rows = []
    for document in documents:
        if input_format == "native":
            turns = [{"role": "query", "content": query}, {"role": "document", "content": document}]
            text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
            rows.append(enc(text))
            continue
        if input_format == "qwen3":
            inst = instruction or default_instruction or SIE_QWEN3_INSTRUCTION
            head = enc(f"<|im_start|>system\n{_QWEN3_SYSTEM}<|im_end|>\n<|im_start|>user\n")
            head += enc(f"<Instruct>: {inst}\n<Query>: {query}\n<Document>: ")
            tail = enc("<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
            doc = enc(document)
        else:
            head = enc(f"<|im_start|>system\n{_MXBAI_SYSTEM}<|im_end|>\n<|im_start|>user\n")
            head += enc(f"query: {query}") + enc("\n")
            tail = enc("\n") + enc(_MXBAI_TASK) + enc("<|im_end|>\n<|im_start|>assistant\n")
            doc = enc(f"document: {document}")
        room = max_length - len(head) - len(tail)
        if room < 0:
            raise ValueError("too small")
        rows.append(head + doc[:room] + tail)
    return rows
