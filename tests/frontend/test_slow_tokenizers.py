"""The frontend's tokenizers built from slow-only folders (converted by the device, see
sie.gpu_proc.tokenizer_conversion) against independent references on many texts: sentencepiece
itself, transformers' slow Python WordPiece, the `tokenizers` byte-level BPE, transformers'
AutoTokenizer and the gliner package's own processor."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.errors import ModelLoadFailed
from sie.frontend.gliner import GlinerPrompts
from sie.frontend.tokenize import TextTokenizer, TokenizerCache
from sie.gpu_proc.tokenizer_conversion import convert_slow_tokenizer
from sie.model_config import parse_model_config
from tests.frontend.test_gliner import LABEL_SETS
from tests.frontend.test_gliner import TEXTS as GLINER_TEXTS
from tests.tiny_models.slow_tokenizers import (
    make_bert_vocab,
    make_deberta_spm,
    make_gliner_spm,
    make_xlmr_spm,
    training_sentences,
)

spm = pytest.importorskip("sentencepiece")

# Texts on which sentencepiece's NFKC and transformers' DeBERTa normalization agree: the texts the
# tiny models were trained on (other draws), unknown characters, whitespace runs, long texts.
PLAIN = [
    *training_sentences(60, seed=7),
    "John Smith lives in New York and works at Springfield Elementary School since 2004.",
    "Dr. Jane O'Neil-Watts met María Gómez in São Paulo on 3/4/2021 at 10:30!",
    "emoji 😀😀 and Ωmega, unseen letters QQQ xyz",
    "  leading, trailing and   inner   spaces  ",
    "tabs\tand\nnew lines\r\n",
    "東京タワー 北京",
    "Zürich ÅÄÖ naïve café",
    "x" * 300,
    "",
]
# Texts transformers' tokenizers see differently from sentencepiece (transformers 5 builds DeBERTa's
# normalizer as NFC, not the model's NFKC charsmap; its added tokens split the text first).
TRANSFORMERS_ONLY = [
    "\uff26\uff55\uff4c\uff4c width \uff11\uff12\uff13",  # full-width letters and digits
    "\ufb01ne \u2460 \u00bd",  # a ligature, a circled digit, a fraction
    "x [MASK] y",
    "a\u00a0b",  # a no-break space
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hub")


def converted(folder: Path, cache: Path) -> Path:
    path = convert_slow_tokenizer(folder, cache)
    assert path is not None and not (folder / "tokenizer.json").exists()
    return path


@pytest.fixture(scope="module")
def deberta(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> tuple[Path, Path]:
    folder = make_deberta_spm(tmp_path_factory.mktemp("deberta"))
    return folder, converted(folder, cache)


def ids_of(encoded: Any) -> list[list[int]]:
    return [
        encoded.input_ids[s:e].tolist()
        for s, e in zip(encoded.offsets[:-1], encoded.offsets[1:], strict=True)
    ]


def test_deberta_spm_matches_sentencepiece(deberta: tuple[Path, Path]) -> None:
    folder, path = deberta
    processor = spm.SentencePieceProcessor(model_file=str(folder / "spm.model"))
    cls, sep = processor.bos_id(), processor.eos_id()  # [CLS] and [SEP], as DeBERTa-v3's spm.model
    got = ids_of(TextTokenizer(path, 512).encode(PLAIN))
    want = [[cls, *processor.encode(text)[:510], sep] for text in PLAIN]
    assert got == want
    assert any(processor.unk_id() in ids for ids in got)  # unknown characters are covered


def test_deberta_spm_matches_transformers(deberta: tuple[Path, Path]) -> None:
    from transformers import AutoTokenizer

    folder, path = deberta
    reference = AutoTokenizer.from_pretrained(str(folder))
    texts = PLAIN + TRANSFORMERS_ONLY
    assert ids_of(TextTokenizer(path, 512).encode(texts)) == reference(texts)["input_ids"]
    short = TextTokenizer(path, 12)
    want = reference(texts, truncation=True, max_length=12)["input_ids"]
    assert ids_of(short.encode(texts)) == want
    queries, docs = PLAIN[:20], PLAIN[20:40]
    pairs = short.encode_pairs(queries, docs)
    want_pairs = reference(queries, docs, truncation=True, max_length=12)
    assert ids_of(pairs) == want_pairs["input_ids"]
    assert pairs.token_type_ids is not None
    assert pairs.token_type_ids.tolist() == [t for row in want_pairs["token_type_ids"] for t in row]


def test_xlmr_sentencepiece_matches_sentencepiece_with_fairseq_ids(
    tmp_path_factory: pytest.TempPathFactory, cache: Path
) -> None:
    folder = make_xlmr_spm(tmp_path_factory.mktemp("xlmr"))
    path = converted(folder, cache)
    processor = spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.bpe.model"))
    unk = processor.unk_id()
    texts = PLAIN + TRANSFORMERS_ONLY[:2]  # XLM-R keeps sentencepiece's NFKC charsmap
    # XLM-R's ids: <s> 0, <pad> 1, </s> 2, <unk> 3, then sentencepiece's pieces shifted by one.
    want = [[0, *(3 if i == unk else i + 1 for i in processor.encode(text)[:510]), 2] for text in texts]
    assert ids_of(TextTokenizer(path, 512).encode(texts)) == want


def test_bert_vocab_txt_matches_the_python_wordpiece(
    tmp_path_factory: pytest.TempPathFactory, cache: Path
) -> None:
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    from tests.integration.reference import minilm_dir

    folder = make_bert_vocab(tmp_path_factory.mktemp("bert"))
    path = converted(folder, cache)
    slow = BertTokenizerLegacy(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    texts = PLAIN + TRANSFORMERS_ONLY + ["Ünïcödé ACCENTS", "control\u0007chars", "supercalifragilistic" * 8]
    tokenizer = TextTokenizer(path, 512)
    assert ids_of(tokenizer.encode(texts)) == slow(texts)["input_ids"]
    assert ids_of(tokenizer.encode(texts)) == ids_of(
        TextTokenizer(minilm_dir() / "tokenizer.json", 512).encode(texts)
    )
    queries, docs = PLAIN[:10], PLAIN[10:20]
    # Untruncated: the Python tokenizer's longest_first cut breaks ties unlike the Rust one.
    pairs = tokenizer.encode_pairs(queries, docs)
    assert ids_of(pairs) == slow(queries, docs)["input_ids"]


def test_byte_level_bpe_vocab_and_merges_match_tokenizers(
    tmp_path_factory: pytest.TempPathFactory, cache: Path
) -> None:
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import RobertaProcessing

    folder = tmp_path_factory.mktemp("bpe")
    trained = ByteLevelBPETokenizer()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trained.train_from_iterator(training_sentences(), vocab_size=600, special_tokens=specials)
    trained.save_model(str(folder))
    config = {"tokenizer_class": "RobertaTokenizer", "model_max_length": 512}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    path = converted(folder, cache)
    reference = ByteLevelBPETokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    reference.add_special_tokens(specials)
    reference.post_processor = RobertaProcessing(("</s>", 2), ("<s>", 0))
    texts = [text for text in PLAIN if len(text) < 300]
    assert ids_of(TextTokenizer(path, 512).encode(texts)) == [e.ids for e in reference.encode_batch(texts)]


@pytest.fixture(scope="module")
def gliner_spm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gliner")
    return make_gliner_spm(tmp_path_factory.mktemp("gliner-spm"))


@pytest.mark.parametrize("labels", LABEL_SETS)
def test_gliner_prompts_from_spm_match_gliner(
    gliner_spm: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, labels: list[str]
) -> None:
    import gliner

    from tests.frontend.test_gliner import gliner_inputs, item

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    convert_slow_tokenizer(gliner_spm)
    prompts = GlinerPrompts.from_dir(gliner_spm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = gliner.GLiNER.from_pretrained(str(gliner_spm), local_files_only=True)
    texts = [*GLINER_TEXTS, *PLAIN[:20]]
    encoded, words = prompts.encode(texts, labels)
    for i, text in enumerate(texts):
        want = gliner_inputs(reference, text, labels)
        ids, mask = item(encoded, i)
        np.testing.assert_array_equal(ids, want["input_ids"][0].numpy())
        np.testing.assert_array_equal(mask, want["words_mask"][0].numpy())
        # The words sent are those with tokens (gliner also counts words cut by the max length).
        assert words[i] == want["word_spans"][: len(words[i])] and int(mask.max(initial=0)) == len(words[i])


def test_a_model_without_a_usable_tokenizer_fails_to_load(
    gliner_spm: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    raw = {
        "sie_id": "t/gliner",
        "weights": {"path": str(gliner_spm)},
        "tasks": {"extract": {}},
        "adapter": "gliner",
    }
    config = parse_model_config(raw)
    tokenizers = TokenizerCache()
    with pytest.raises(ModelLoadFailed, match="not converted yet") as raised:  # before the device's load
        tokenizers.derived(config, "gliner", lambda shared: GlinerPrompts.for_model(shared, config))
    assert raised.value.status == 502 and str(gliner_spm) in raised.value.message
    convert_slow_tokenizer(gliner_spm)
    prompts = tokenizers.derived(config, "gliner", lambda shared: GlinerPrompts.for_model(shared, config))
    assert isinstance(prompts, GlinerPrompts)
