"""A tiny random-weight Parakeet-TDT with a SentencePiece-shaped tokenizer and its processor files.

The tokenizer is built with `tokenizers` (no hub): a BPE over a few letters with SentencePiece's
Metaspace pre-tokenizer and decoder, special tokens <unk> <s> <pad> first (pad is id 2, as the
real checkpoint's config says) and <blank> last, at `blank_token_id` = the last vocabulary id.
The joint's duration logits get a bias towards short advances and the token logits one towards
blank, so the random decoder emits a few tokens per second of audio (as a trained one does)
instead of one on every frame.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PIECES = ["▁", "a", "b", "c", "d", "e", ".", ",", "?", "'", "▁a", "▁b", "▁c", "▁d", "▁e", "ab", "cd", "de"]
SPECIALS_FIRST = ["<unk>", "<s>", "<pad>"]
BLANK = "<blank>"
PUNCTUATION_BIAS = 1.2  # punctuation now and then, so the timestamp refinement is exercised
# generate() picks its next token by an argmax over token and duration logits together; lowering
# the duration logits keeps that argmax on a token, as in a trained model.
DURATION_SHIFT = 6.0
TOKEN_SPREAD = 0.3
AUDIO_GAIN = 4.0  # per-token logit offsets, so the random decoder uses more of its vocabulary


def parakeet_vocab() -> dict[str, int]:
    tokens = [*SPECIALS_FIRST, *PIECES, BLANK]
    return {token: i for i, token in enumerate(tokens)}


def write_parakeet_tokenizer(folder: Path) -> Any:
    """tokenizer.json and tokenizer_config.json as a transformers ParakeetTokenizer saves them."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import ParakeetTokenizer

    vocab = parakeet_vocab()
    merges = [("▁", "a"), ("▁", "b"), ("▁", "c"), ("▁", "d"), ("▁", "e"), ("a", "b"), ("c", "d"), ("d", "e")]
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    backend.add_special_tokens([AddedToken(t, special=True) for t in (*SPECIALS_FIRST, BLANK)])
    tokenizer = ParakeetTokenizer(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>")
    tokenizer.save_pretrained(folder)
    return tokenizer


def make_parakeet(folder: Path, seed: int = 0) -> Path:
    """Write config, weights, generation config, tokenizer and processor config into `folder`."""
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_parakeet_tokenizer(folder)
    vocab = parakeet_vocab()
    blank = vocab[BLANK]
    encoder = transformers.ParakeetEncoderConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        conv_kernel_size=9,
        subsampling_factor=8,
        subsampling_conv_channels=8,
        num_mel_bins=128,
        dropout=0.0,
        layerdrop=0.0,
        activation_dropout=0.0,
        attention_dropout=0.0,
        initializer_range=0.2,  # wide enough that different audio gives different tokens
    )
    config = transformers.ParakeetTDTConfig(
        vocab_size=len(vocab),
        decoder_hidden_size=24,
        num_decoder_layers=2,
        durations=[0, 1, 2, 3, 4],
        encoder_config=encoder.to_dict(),
        pad_token_id=vocab["<pad>"],
        blank_token_id=blank,
    )
    torch.manual_seed(seed)
    model = transformers.ParakeetForTDT(config).eval()
    shape_joint(model, blank=blank, punctuation=[vocab[p] for p in ".,?"])
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=blank, pad_token_id=vocab["<pad>"], bos_token_id=blank
    )
    model.save_pretrained(folder)
    features = transformers.ParakeetFeatureExtractor(feature_size=128)
    processor = transformers.ParakeetProcessor(features, tokenizer, decoder_type="tdt")
    processor.save_pretrained(folder)
    return folder


def shape_joint(model: Any, *, blank: int, punctuation: list[int]) -> None:
    """Bias the joint's output so the random decoder behaves like a trained one: mostly blanks that
    advance a few frames, a token now and then, sometimes punctuation, sometimes a zero duration."""
    import torch

    head = model.joint.head
    vocab_size = model.config.vocab_size
    with torch.no_grad():
        model.encoder_projector.weight.mul_(AUDIO_GAIN)  # the audio, not the decoder state, picks tokens
        spread = torch.randn(vocab_size, generator=torch.Generator().manual_seed(1))
        head.bias[:vocab_size] = spread * TOKEN_SPREAD
        head.bias[blank] = 1.0
        head.bias[punctuation] = PUNCTUATION_BIAS
        head.bias[vocab_size:] = torch.tensor([-1.0, 0.6, 0.6, 0.3, 0.0]) - DURATION_SHIFT


def model_yaml_parakeet(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": False, "audio": True},
        "tasks": {"extract": {}},
        "adapter": "parakeet",
    }
