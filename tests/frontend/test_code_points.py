"""Weightless models' tokenization: one token per code point, flat, truncated as a tokenizer would."""

from __future__ import annotations

import numpy as np

from sie.frontend.code_points import CodePointTokenizer
from sie.frontend.tokenize import TokenizerCache
from sie.model_config import parse_model_config
from tests.tiny_models.fake import model_yaml_fake


def items(encoded, i: int) -> list[int]:  # type: ignore[no-untyped-def]
    return encoded.input_ids[encoded.offsets[i] : encoded.offsets[i + 1]].tolist()


def test_each_code_point_is_a_token_and_texts_are_cut_at_max_length() -> None:
    texts = ["héllo", "", "日本\U0001f600", "a\ud800b", "x" * 10]
    encoded = CodePointTokenizer(8).encode(texts)
    assert [items(encoded, i) for i in range(len(texts))] == [[ord(c) for c in t[:8]] for t in texts]
    assert encoded.offsets.dtype == np.int32 and encoded.input_ids.dtype == np.int32
    assert encoded.token_type_ids is None and encoded.n_tokens == 5 + 0 + 3 + 3 + 8


def test_pairs_carry_token_types_and_are_cut_longest_first() -> None:
    encoded = CodePointTokenizer(6).encode_pairs(["ab", "abcdefgh", ""], ["cd", "xyz", "q"])
    assert [items(encoded, i) for i in range(3)] == [
        [ord(c) for c in "abcd"],
        [ord(c) for c in "abcxyz"],  # the longer side gives way until both fit
        [ord("q")],
    ]
    assert encoded.token_type_ids is not None
    assert encoded.token_type_ids.tolist() == [0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1]


def test_the_cache_gives_weightless_models_code_points_at_their_length() -> None:
    config = parse_model_config(model_yaml_fake("tiny/fake"))
    tokenizer = TokenizerCache().get(config)
    assert isinstance(tokenizer, CodePointTokenizer) and tokenizer.max_length == 64
