"""A byte-level BPE tokenizer trained on a small corpus: the tokenizer of the tiny decoder models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def byte_level_bpe(corpus: Sequence[str], specials: Sequence[str], vocab_size: int) -> Any:
    """GPT-2-style byte-level BPE (no prefix space), `specials` first in its vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(corpus) * 3, trainer)
    return tokenizer
