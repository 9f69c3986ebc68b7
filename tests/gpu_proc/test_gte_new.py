"""GTE folders of `model_type: new` (new-impl's layout) on transformers' GTE classes: the dense and
SPLADE families against the transformers model the weights came from, new-impl's fixed-NTK
frequencies included, and the configurations the native classes cannot run left to the folder's
own code."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from sie.companions import code_repositories
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.common import ModelCodeRequired, from_pretrained
from sie.gpu_proc.adapters.gte_new import native_gte
from sie.gpu_proc.runner import Runner
from sie.gte_new_config import unsupported
from sie.model_config import parse_model_config
from sie.shm.layout import ResultKind, mask_of
from tests.gpu_proc.test_splade_adapter import densify, sparse_batch
from tests.tiny_models.gte_new import VOCAB_SIZE, make_gte_new

CPU = torch.device("cpu")
pytestmark = pytest.mark.usefixtures("deterministic_torch")


def random_ids(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        np.concatenate([[1], rng.integers(5, VOCAB_SIZE, rng.integers(1, 40)), [2]]).astype(np.int32)
        for _ in range(n)
    ]


def one_by_one(model: torch.nn.Module, items: list[np.ndarray], field: str) -> list[torch.Tensor]:
    with torch.no_grad():
        return [
            getattr(model(input_ids=torch.from_numpy(ids.astype(np.int64))[None]), field)[0] for ids in items
        ]


@pytest.mark.parametrize("ntk_factor", [None, 2.0])
@pytest.mark.parametrize("masked_lm", [False, True])
def test_a_new_folder_loads_as_the_model_its_weights_came_from(
    tmp_path: Path, masked_lm: bool, ntk_factor: float | None
) -> None:
    reference = make_gte_new(tmp_path, masked_lm=masked_lm, ntk_factor=ntk_factor, type_vocab_size=1)
    auto_class = transformers.AutoModelForMaskedLM if masked_lm else transformers.AutoModel
    loaded = from_pretrained(auto_class, tmp_path, torch.float32).eval()
    field = "logits" if masked_lm else "last_hidden_state"
    items = random_ids(6, seed=3)
    for ours, theirs in zip(
        one_by_one(loaded, items, field), one_by_one(reference, items, field), strict=True
    ):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_ntk_scaling_changes_what_the_model_computes(tmp_path: Path) -> None:
    """The NTK case above can only fail if the frequencies matter: the same weights under plain
    rotary positions give other outputs."""
    scaled = make_gte_new(tmp_path / "ntk", masked_lm=False, ntk_factor=2.0)
    plain = make_gte_new(tmp_path / "plain", masked_lm=False)
    items = random_ids(3, seed=4)
    differences = [
        (a - b).abs().max().item()
        for a, b in zip(
            one_by_one(scaled, items, "last_hidden_state"),
            one_by_one(plain, items, "last_hidden_state"),
            strict=True,
        )
    ]
    assert max(differences) > 1e-3


def test_no_model_code_is_needed_or_run(tmp_path: Path) -> None:
    make_gte_new(tmp_path, masked_lm=True)
    model = from_pretrained(transformers.AutoModelForMaskedLM, tmp_path, torch.float32)
    assert type(model) is transformers.GteForMaskedLM  # not new-impl's NewForMaskedLM


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"position_embedding_type": "absolute"}, "position_embedding_type"),
        ({"layer_norm_type": "rms_norm"}, "layer_norm_type"),
        ({"logn_attention_scale": True}, "logn_attention_scale"),
        ({"pack_qkv": False}, "pack_qkv"),
        ({"hidden_act": "silu"}, "hidden_act"),
        ({"rope_scaling": {"type": "ntk", "factor": 2.0, "mixed_b": 0.8}}, "rope_scaling"),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
    ],
)
def test_what_the_native_classes_cannot_run_is_left_to_the_folders_code(
    tmp_path: Path, change: dict[str, object], reason: str
) -> None:
    make_gte_new(tmp_path, masked_lm=True)
    raw = {**json.loads((tmp_path / "config.json").read_text()), **change}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert reason in (unsupported(raw) or "")
    assert native_gte(transformers.AutoModelForMaskedLM, tmp_path) is None
    # Without trust_remote_code the folder's code is not run, and nothing else computes it.
    with pytest.raises(ModelCodeRequired):
        from_pretrained(transformers.AutoModelForMaskedLM, tmp_path, torch.float32)


def test_other_heads_and_folders_are_not_taken(tmp_path: Path) -> None:
    make_gte_new(tmp_path, masked_lm=False)
    assert native_gte(transformers.AutoModelForSequenceClassification, tmp_path) is None
    assert native_gte(transformers.AutoModel, tmp_path / "missing") is None


def splade_yaml(folder: Path, loadtime: dict[str, object]) -> dict[str, object]:
    return {
        "sie_id": "tiny/gte-sparse",
        "weights": {"path": str(folder)},
        "tasks": {"encode": {"sparse": {"dim": VOCAB_SIZE}}},
        "max_sequence_length": 128,
        "profiles": {"default": {"adapter": "splade", "adapter_options": {"loadtime": loadtime}}},
    }


def write_tokenizer_specials(folder: Path, special: dict[str, int]) -> None:
    """A tokenizer.json whose added tokens are the given specials (plus one that is not special)."""
    added = [{"id": i, "content": t, "special": True} for t, i in special.items()]
    added.append({"id": 300, "content": "<extra>", "special": False})
    (folder / "tokenizer.json").write_text(json.dumps({"added_tokens": added}))


@pytest.mark.parametrize("activation", ["relu", "log1p_relu"])
def test_splade_on_a_gte_masked_lm(tmp_path: Path, activation: str) -> None:
    """SIE's GTE sparse adapter: max over tokens of log1p(relu(logits)) (log1p once more for v3),
    the special tokens' weights zeroed."""
    reference = make_gte_new(tmp_path, masked_lm=True, ntk_factor=2.0)
    specials = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2}
    write_tokenizer_specials(tmp_path, specials)
    config = parse_model_config(
        splade_yaml(tmp_path, {"activation": activation, "zero_special_tokens": True})
    )
    adapter = load_adapter(config, tmp_path, "cpu")
    items = random_ids(7, seed=5)
    got = densify(Runner(CPU).run(adapter, sparse_batch(items))[ResultKind.SPARSE], VOCAB_SIZE)
    expected = []
    for logits in one_by_one(reference, items, "logits"):
        weights = torch.log1p(torch.relu(logits)).max(dim=0).values
        if activation == "log1p_relu":
            weights = torch.log1p(weights)
        weights[list(specials.values())] = 0
        expected.append(weights.numpy())
    np.testing.assert_allclose(got, np.stack(expected), atol=1e-5)
    assert not got[:, list(specials.values())].any()
    assert got[:, 300].any()  # an added token that is not special keeps its weight


def test_gte_sparse_new_folder_without_options_is_plain_splade(tmp_path: Path) -> None:
    reference = make_gte_new(tmp_path, masked_lm=True)
    adapter = load_adapter(parse_model_config(splade_yaml(tmp_path, {})), tmp_path, "cpu")
    items = random_ids(3, seed=6)
    got = densify(Runner(CPU).run(adapter, sparse_batch(items))[ResultKind.SPARSE], VOCAB_SIZE)
    expected = [
        torch.log1p(torch.relu(x)).max(dim=0).values.numpy() for x in one_by_one(reference, items, "logits")
    ]
    np.testing.assert_allclose(got, np.stack(expected), atol=1e-5)


def test_dense_cls_embeddings_of_a_new_folder(tmp_path: Path) -> None:
    """gte-multilingual-base's recipe (a NewModel folder, CLS pooling) on the dense family; the
    frontends normalize the rows."""
    reference = make_gte_new(tmp_path, masked_lm=False, ntk_factor=2.0, type_vocab_size=1)
    raw = {
        "sie_id": "tiny/gte-dense",
        "weights": {"path": str(tmp_path)},
        "tasks": {"encode": {"dense": {"dim": reference.config.hidden_size}}},
        "max_sequence_length": 128,
        "profiles": {
            "default": {
                "adapter": "dense",
                "adapter_options": {"runtime": {"pooling": "cls", "normalize": True}},
            }
        },
    }
    adapter = load_adapter(parse_model_config(raw), tmp_path, "cpu")
    items = random_ids(6, seed=7)
    batch = sparse_batch(items)
    batch = replace(batch, key=batch.key._replace(output_mask=mask_of({ResultKind.DENSE})))
    got = Runner(CPU).run_dense(adapter, batch)
    cls = torch.stack([hidden[0] for hidden in one_by_one(reference, items, "last_hidden_state")])
    np.testing.assert_allclose(got, cls.numpy(), atol=1e-5)


def test_the_encoder_of_a_token_classification_folder(tmp_path: Path) -> None:
    """gte-multilingual-base is saved as NewForTokenClassification: the encoder under `new.` and a
    classifier beside it. The dense family reads the encoder alone."""
    reference = make_gte_new(tmp_path, masked_lm=False, ntk_factor=8.0, type_vocab_size=1)
    tensors = {f"new.{name}": t for name, t in load_file(str(tmp_path / "model.safetensors")).items()}
    tensors |= {
        "classifier.weight": torch.randn(2, reference.config.hidden_size),
        "classifier.bias": torch.zeros(2),
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "architectures": ["NewForTokenClassification"]}))
    loaded = from_pretrained(transformers.AutoModel, tmp_path, torch.float32).eval()
    items = random_ids(4, seed=8)
    pairs = zip(
        one_by_one(loaded, items, "last_hidden_state"),
        one_by_one(reference, items, "last_hidden_state"),
        strict=True,
    )
    for ours, theirs in pairs:
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_no_code_repository_is_fetched_for_a_folder_that_loads_natively(tmp_path: Path) -> None:
    """With a cluster cache, a folder's code repositories are fetched beside it; a "new" folder the
    native classes run needs none, and one they cannot run still names new-impl."""
    make_gte_new(tmp_path, masked_lm=True)
    assert code_repositories(tmp_path, "abc") == {}
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "layer_norm_type": "rms_norm"}))
    assert code_repositories(tmp_path, "abc") == {"Alibaba-NLP/new-impl": "abc"}


def test_an_unknown_activation_option_fails_the_load(tmp_path: Path) -> None:
    make_gte_new(tmp_path, masked_lm=True)
    with pytest.raises(ValueError, match="activation 'gelu'"):
        load_adapter(parse_model_config(splade_yaml(tmp_path, {"activation": "gelu"})), tmp_path, "cpu")
