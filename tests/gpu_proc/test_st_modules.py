"""DenseAdapter with sentence-transformers module stacks (Pooling, Dense..., Normalize) against
sentence-transformers' own `SentenceTransformer`, on tiny random models saved by it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.dense import DenseAdapter
from sie.gpu_proc.runner import Runner
from sie.model_config import ModelConfig, parse_model_config
from tests.tiny_models.colbert import write_tokenizer

from .tiny import as_batch

CPU = torch.device("cpu")
ATOL = 1e-4
HIDDEN = 32
TEXTS = [
    "a",
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map text into vectors; nearby vectors mean similar texts.",
    "short one",
    "Sentence-transformers stacks a transformer, pooling, dense layers and a normalization "
    "step, and saves each of them in its own folder beside the encoder's weights.",
]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


def st_modules() -> Any:
    from sentence_transformers.sentence_transformer import modules

    return modules


@pytest.fixture(scope="module")
def bert_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT (MiniLM's WordPiece tokenizer) saved by transformers."""
    import transformers

    folder = write_tokenizer(tmp_path_factory.mktemp("bert_base"))
    config = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def gemma_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Gemma3 text encoder, bidirectional as embeddinggemma's, both attention kinds."""
    import transformers

    folder = write_tokenizer(tmp_path_factory.mktemp("gemma_base"))
    config = transformers.Gemma3TextConfig(
        vocab_size=30522,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=128,
        sliding_window=8,  # shorter than the long test texts, so the window matters
        layer_types=["sliding_attention", "full_attention"],
        use_bidirectional_attention=True,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(folder)
    return folder


def save_stack(base: Path, folder: Path, *heads: Any, pooling: str = "mean", **save: Any) -> Any:
    """A SentenceTransformer of `base` + Pooling + `heads`, saved into `folder` as it saves models."""
    from sentence_transformers import SentenceTransformer

    modules = st_modules()
    torch.manual_seed(1)
    transformer = modules.Transformer(str(base))
    stack = [transformer, modules.Pooling(HIDDEN, pooling), *heads]
    model = SentenceTransformer(modules=stack, device="cpu")
    model.save(str(folder), **save)
    return model


def dense(in_features: int, out_features: int, activation: torch.nn.Module | None = None, **kw: Any) -> Any:
    torch.manual_seed(in_features * 1000 + out_features)
    return st_modules().Dense(in_features, out_features, activation_function=activation, **kw)


def config(pooling: str = "mean", **loadtime: Any) -> ModelConfig:
    options = {"runtime": {"pooling": pooling}, "loadtime": loadtime}
    profile: dict[str, Any] = {"adapter": "dense", "adapter_options": options}
    return parse_model_config({"sie_id": "tiny/st", "profiles": {"default": profile}})


def load(folder: Path, pooling: str = "mean", **loadtime: Any) -> DenseAdapter:
    adapter = load_adapter(config(pooling, **loadtime), folder, "cpu")
    assert isinstance(adapter, DenseAdapter)
    return adapter


def ours(adapter: DenseAdapter, tokenizer: Any, normalize: bool = True) -> np.ndarray:
    """The adapter's rows for TEXTS, token ids from the reference's own tokenizer, L2-normalized."""
    items = [np.asarray(tokenizer(text)["input_ids"], np.int32) for text in TEXTS]
    rows = Runner(CPU).run_dense(adapter, as_batch(items))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True) if normalize else rows


def assert_matches(adapter: DenseAdapter, reference: Any) -> None:
    want = reference.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    got = ours(adapter, reference.tokenizer)
    assert got.shape == want.shape == (len(TEXTS), adapter.dim)
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


@pytest.mark.parametrize("safe_serialization", [True, False])
def test_bert_dense_stack_matches_sentence_transformers(
    bert_base: Path, tmp_path: Path, safe_serialization: bool
) -> None:
    heads = (dense(HIDDEN, 48, torch.nn.Tanh()), dense(48, 16), st_modules().Normalize())
    reference = save_stack(bert_base, tmp_path, *heads, safe_serialization=safe_serialization)
    weights = "model.safetensors" if safe_serialization else "pytorch_model.bin"
    assert (tmp_path / "2_Dense" / weights).is_file() and (tmp_path / "3_Dense" / weights).is_file()
    adapter = load(tmp_path)
    assert adapter.dim == 16
    assert_matches(adapter, reference)


def test_gemma3_dense_stack_matches_sentence_transformers(gemma_base: Path, tmp_path: Path) -> None:
    # embeddinggemma's shape: mean pooling, then hidden -> 4 * hidden -> hidden, then Normalize.
    heads = (dense(HIDDEN, 4 * HIDDEN), dense(4 * HIDDEN, HIDDEN), st_modules().Normalize())
    reference = save_stack(gemma_base, tmp_path, *heads)
    adapter = load(tmp_path)
    assert adapter.dim == HIDDEN and not adapter.is_padding_free
    assert_matches(adapter, reference)


ACTIVATIONS = [torch.nn.Identity(), torch.nn.Tanh(), torch.nn.ReLU(), torch.nn.GELU(), torch.nn.SiLU()]


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: type(a).__name__)
def test_each_activation_matches(bert_base: Path, tmp_path: Path, activation: torch.nn.Module) -> None:
    reference = save_stack(bert_base, tmp_path, dense(HIDDEN, 24, activation), pooling="cls")
    assert_matches(load(tmp_path, "cls"), reference)


def test_short_activation_path_and_missing_activation(bert_base: Path, tmp_path: Path) -> None:
    reference = save_stack(bert_base, tmp_path, dense(HIDDEN, 24, torch.nn.Tanh()))
    dense_config = tmp_path / "2_Dense" / "config.json"
    settings = json.loads(dense_config.read_text())
    assert settings["activation_function"] == "torch.nn.modules.activation.Tanh"
    write_json(dense_config, {**settings, "activation_function": "torch.nn.Tanh"})
    assert_matches(load(tmp_path), reference)
    # sentence-transformers' Dense builds Tanh when its config names no activation.
    write_json(dense_config, {k: v for k, v in settings.items() if k != "activation_function"})
    from sentence_transformers import SentenceTransformer

    assert_matches(load(tmp_path), SentenceTransformer(str(tmp_path), device="cpu"))


@pytest.mark.parametrize("activation", ["torch.nn.modules.activation.Softmax", "my_package.Swish"])
def test_unknown_activation_is_refused_at_load(bert_base: Path, tmp_path: Path, activation: str) -> None:
    save_stack(bert_base, tmp_path, dense(HIDDEN, 24))
    dense_config = tmp_path / "2_Dense" / "config.json"
    write_json(dense_config, {**json.loads(dense_config.read_text()), "activation_function": activation})
    with pytest.raises(ValueError, match=rf"unsupported Dense activation '{activation}'"):
        load(tmp_path)


def test_residual_dense_matches(bert_base: Path, tmp_path: Path) -> None:
    reference = save_stack(bert_base, tmp_path, dense(HIDDEN, 24, torch.nn.Tanh(), use_residual=True))
    assert_matches(load(tmp_path), reference)


def test_normalize_between_dense_layers_runs_on_the_device(bert_base: Path, tmp_path: Path) -> None:
    normalize = st_modules().Normalize
    heads = (dense(HIDDEN, 24), normalize(), dense(24, 8, torch.nn.Tanh()), normalize())
    reference = save_stack(bert_base, tmp_path, *heads)
    adapter = load(tmp_path)
    assert adapter.dim == 8
    assert_matches(adapter, reference)


def test_normalize_alone_changes_nothing(bert_base: Path, tmp_path: Path) -> None:
    reference = save_stack(bert_base, tmp_path, st_modules().Normalize())
    adapter = load(tmp_path)
    assert adapter._head is None and adapter.dim == HIDDEN
    plain = load(bert_base)
    tokenizer = reference.tokenizer
    np.testing.assert_array_equal(ours(adapter, tokenizer, False), ours(plain, tokenizer, False))
    assert_matches(adapter, reference)


def test_projection_path_picks_one_dense_folder(bert_base: Path, tmp_path: Path) -> None:
    # As stella's folders: modules.json names 2_Dense, and 2_Dense_16 is another projection beside it.
    save_stack(bert_base, tmp_path / "model", dense(HIDDEN, 48))
    chosen = save_stack(bert_base, tmp_path / "other", dense(HIDDEN, 16))
    shutil.copytree(tmp_path / "other" / "2_Dense", tmp_path / "model" / "2_Dense_16")
    assert load(tmp_path / "model").dim == 48
    adapter = load(tmp_path / "model", dense_projection_path="2_Dense_16")
    assert adapter.dim == 16
    assert_matches(adapter, chosen)


def test_projection_path_without_modules_json(bert_base: Path, tmp_path: Path) -> None:
    chosen = save_stack(bert_base, tmp_path / "st", dense(HIDDEN, 16, torch.nn.Tanh()))
    folder = tmp_path / "plain"
    shutil.copytree(bert_base, folder)
    shutil.copytree(tmp_path / "st" / "2_Dense", folder / "2_Dense_16")
    assert_matches(load(folder, dense_projection_path="2_Dense_16"), chosen)


@pytest.mark.parametrize("path", ["../st/2_Dense", "/tmp", "2_Dense_missing"])
def test_projection_path_must_be_a_folder_inside(bert_base: Path, tmp_path: Path, path: str) -> None:
    save_stack(bert_base, tmp_path / "st", dense(HIDDEN, 16))
    with pytest.raises(ValueError, match="no module folder"):
        load(tmp_path / "st", dense_projection_path=path)


def test_unknown_module_and_token_level_dense_are_refused(bert_base: Path, tmp_path: Path) -> None:
    save_stack(bert_base, tmp_path, dense(HIDDEN, 24), st_modules().Normalize())
    modules = json.loads((tmp_path / "modules.json").read_text())
    layer_norm = {
        "idx": 5,
        "name": "5",
        "path": "5_LayerNorm",
        "type": "sentence_transformers.models.LayerNorm",
    }
    write_json(tmp_path / "modules.json", [*modules, layer_norm])
    with pytest.raises(ValueError, match=r"module type 'sentence_transformers\.models\.LayerNorm'"):
        load(tmp_path)
    write_json(tmp_path / "modules.json", modules)
    dense_config = tmp_path / "2_Dense" / "config.json"
    write_json(
        dense_config, {**json.loads(dense_config.read_text()), "module_input_name": "token_embeddings"}
    )
    with pytest.raises(ValueError, match="token_embeddings"):
        load(tmp_path)


def test_a_projection_of_another_width_is_refused(bert_base: Path, tmp_path: Path) -> None:
    save_stack(bert_base, tmp_path, dense(48, 16))
    with pytest.raises(ValueError, match="expects 48 features, gets 32"):
        load(tmp_path)


def test_head_runs_in_the_model_dtype(bert_base: Path, tmp_path: Path) -> None:
    reference = save_stack(bert_base, tmp_path, dense(HIDDEN, 48, torch.nn.Tanh()), dense(48, 16))
    options = {"runtime": {"pooling": "mean"}}
    profile = {"adapter": "dense", "compute_precision": "bfloat16", "adapter_options": options}
    adapter = load_adapter(
        parse_model_config({"sie_id": "t", "profiles": {"default": profile}}), tmp_path, "cpu"
    )
    assert isinstance(adapter, DenseAdapter) and adapter._head is not None
    assert {p.dtype for p in adapter._head.parameters()} == {torch.bfloat16}
    head_bytes = sum(p.numel() * 2 for p in adapter._head.parameters())
    model = adapter._model
    assert model is not None
    assert adapter.memory_bytes() == sum(p.numel() * 2 for p in model.parameters()) + head_bytes + sum(
        b.numel() * b.element_size() for b in model.buffers()
    )
    want = reference.encode(TEXTS, normalize_embeddings=True)
    got = ours(adapter, reference.tokenizer)
    assert got.dtype == np.float32 and float((got * want).sum(1).min()) > 0.99


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data))
