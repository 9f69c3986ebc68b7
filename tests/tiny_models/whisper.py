"""A tiny random-weight Whisper with a real Whisper-shaped tokenizer and generation config.

The vocabulary is the 256 byte symbols and a few merges, then Whisper's special tokens in their
real order (end of text, start of transcript, the languages, the tasks, ..., no-timestamps) and
the 1501 timestamp tokens <|0.00|> .. <|30.00|>, so every id relation `generate` relies on holds
(timestamps begin right after no-timestamps). The feature extractor is transformers' default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("o", "n")]
MAX_LENGTH = 28  # a random model seldom ends on its own; keep every generation short
TIMESTAMP_OFFSET, EOT_OFFSET = -2.0, 1.5  # logit offsets: see shape_logits
AFTER_TASKS = ["<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]


def whisper_vocab() -> tuple[dict[str, int], list[str], list[str]]:
    """(vocab, special tokens in id order, timestamp tokens)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    vocab = {s: i for i, s in enumerate(bytes_to_unicode().values())}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    languages = [f"<|{code}|>" for code in LANGUAGES]
    specials = [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *languages,
        "<|translate|>",
        "<|transcribe|>",
        *AFTER_TASKS,
    ]
    timestamps = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    return vocab, specials, timestamps


def write_whisper_tokenizer(folder: Path) -> Any:
    """Save the tokenizer (tokenizer.json and its config) into `folder`; return it."""
    import transformers

    vocab, specials, timestamps = whisper_vocab()
    tokenizer = transformers.WhisperTokenizer(vocab=vocab, merges=MERGES)
    tokenizer.add_special_tokens({"additional_special_tokens": specials})  # type: ignore[dict-item]
    tokenizer.add_tokens(timestamps)
    first = tokenizer.convert_tokens_to_ids(timestamps[0])
    assert first == tokenizer.convert_tokens_to_ids("<|notimestamps|>") + 1 == len(vocab) + len(specials)
    tokenizer.save_pretrained(folder)
    return tokenizer


def make_whisper(folder: Path, seed: int = 0) -> Path:
    """Write config, weights, generation config, tokenizer.json and preprocessor_config.json."""
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    vocab, specials, timestamps = whisper_vocab()
    tokenizer = write_whisper_tokenizer(folder)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in (*specials, timestamps[0])}
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = transformers.WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=80,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=1500,
        max_target_positions=448,
        pad_token_id=eot,
        bos_token_id=eot,
        eos_token_id=eot,
        decoder_start_token_id=sot,
        init_std=0.2,  # wide enough that different audio gives different tokens
    )
    torch.manual_seed(seed)
    model = transformers.WhisperForConditionalGeneration(config).eval()
    shape_logits(model, eot=eot, first_timestamp=ids[timestamps[0]])
    model.generation_config = generation_config(ids, specials, [vocab["Ġ"], eot])
    model.save_pretrained(folder)
    transformers.WhisperFeatureExtractor().save_pretrained(folder)
    return folder


def shape_logits(model: Any, *, eot: int, first_timestamp: int) -> None:
    """Make the random decoder behave like a trained one in the ways `generate` cares about: it
    never predicts special tokens, now and then closes a segment with a timestamp, and sometimes
    ends. One hidden unit is pinned to 1 by the final layer norm, and each token's embedding
    (tied to the output projection) reads it with a per-kind weight: a fixed logit offset."""
    import torch

    decoder = model.model.decoder
    with torch.no_grad():
        decoder.layer_norm.weight[0], decoder.layer_norm.bias[0] = 0.0, 1.0
        offsets = decoder.embed_tokens.weight[:, 0]
        offsets.zero_()
        offsets[first_timestamp:] = TIMESTAMP_OFFSET
        offsets[eot + 1 : first_timestamp] = -20.0  # start of transcript, languages, tasks, ...
        offsets[eot] = EOT_OFFSET


def generation_config(ids: dict[str, int], specials: list[str], begin_suppress: list[int]) -> Any:
    from transformers import GenerationConfig

    languages = [token for token in specials if len(token) <= 9 and token not in ("<|endoftext|>",)]
    return GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"],
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|endoftext|>"],
        lang_to_id={token: ids[token] for token in languages if token.strip("<|>").isalpha()},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        no_timestamps_token_id=ids["<|notimestamps|>"],
        prev_sot_token_id=ids["<|startofprev|>"],
        is_multilingual=True,
        max_initial_timestamp_index=50,
        max_length=MAX_LENGTH,
        begin_suppress_tokens=begin_suppress,
        suppress_tokens=[],
        alignment_heads=[[1, 0], [1, 2]],
    )


def model_yaml_whisper(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": False, "audio": True},
        "tasks": {"extract": {}},
        "max_sequence_length": 448,
        "adapter": "whisper",
    }
