"""ContextPrunerAdapter + Runner against transformers and the keep head run as torch modules.

The relevance logits must be the sequence classifier's, and the per-token keep logits the head's
on the classifier's own last hidden states, for each real token of each pair: through the packed
forward (BERT, XLM-R) and through the model's own forward (ModernBERT).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.context_pruner import ContextPrunerAdapter
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import ResultKind
from tests.tiny_models.context_pruner import (
    HEAD_FILE,
    HEAD_LAYOUTS,
    keep_head,
    make_context_pruner,
    model_yaml_context_pruner,
    save_head,
)
from tests.tiny_models.cross_encoder import pairs_batch

CPU = torch.device("cpu")
ATOL = 1e-4
ARCHS = ("bert", "xlmr", "modernbert")
QUERY = "how long do cats sleep"
DOCS = [
    "Cats sleep between 12 and 16 hours a day, often in short naps.",
    "The stock market closed higher on Friday.",
    "cats",
    "The quick brown fox jumps over the lazy dog " * 6,
]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {arch: make_context_pruner(tmp_path_factory.mktemp(arch), seed=2, arch=arch) for arch in ARCHS}


def load(folder: Path, **loadtime: object) -> ContextPrunerAdapter:
    raw = model_yaml_context_pruner("tiny/pruner", folder)
    raw["profiles"]["default"]["adapter_options"]["loadtime"] = loadtime
    adapter = load_adapter(parse_model_config(raw), folder, "cpu")
    assert isinstance(adapter, ContextPrunerAdapter)
    return adapter


def reference(folder: Path, queries: list[str], docs: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
    """transformers' logits, and the head on its last hidden states per real token."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    inputs = tokenizer(queries, docs, padding=True, truncation=True, max_length=512, return_tensors="pt")
    with torch.no_grad():
        output = model(**inputs, output_hidden_states=True)
        keep = keep_head()(output.hidden_states[-1])
    mask = inputs["attention_mask"].bool()
    return output.logits.numpy(), [keep[i][mask[i]].numpy() for i in range(len(docs))]


@pytest.mark.parametrize("arch", ARCHS)
def test_relevance_and_keep_logits_match_transformers(folders: dict[str, Path], arch: str) -> None:
    folder = folders[arch]
    adapter = load(folder)
    assert adapter.is_padding_free == (arch != "modernbert")
    outputs = Runner(CPU).run(adapter, pairs_batch(folder, [QUERY] * len(DOCS), DOCS, extract=True))
    want_logits, want_keep = reference(folder, [QUERY] * len(DOCS), DOCS)
    np.testing.assert_allclose(outputs[ResultKind.SCORES].values, want_logits, atol=ATOL)
    keep = outputs[ResultKind.TOKEN_SCORES]
    assert keep.row_offsets is not None
    for i, want in enumerate(want_keep):
        got = keep.values[keep.row_offsets[i] : keep.row_offsets[i + 1]]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=ATOL)
    # The head's logits spread across the thresholds, so the frontend tests see every label.
    probabilities = 1 / (1 + np.exp(-keep.values))
    assert probabilities.min() < 0.6 and probabilities.max() > 0.9


def test_a_score_batch_runs_the_classifier_alone(folders: dict[str, Path]) -> None:
    folder = folders["xlmr"]
    outputs = Runner(CPU).run(load(folder), pairs_batch(folder, [QUERY] * len(DOCS), DOCS))
    assert set(outputs) == {ResultKind.SCORES}
    np.testing.assert_allclose(
        outputs[ResultKind.SCORES].values, reference(folder, [QUERY] * 4, DOCS)[0], atol=ATOL
    )


@pytest.mark.parametrize("layout", HEAD_LAYOUTS)
def test_each_saved_layout_of_the_head_loads(tmp_path: Path, folders: dict[str, Path], layout: str) -> None:
    head_file = save_head(tmp_path / "elsewhere" / "head.pt", layout)
    adapter = load(folders["xlmr"], pruning_head_path=str(head_file))
    want = keep_head()
    assert adapter._keep_head is not None
    torch.testing.assert_close(adapter._keep_head.up.weight, want[0].weight)
    torch.testing.assert_close(adapter._keep_head.out.bias, want[3].bias)


def test_the_head_is_read_from_a_folder_by_its_file_name(tmp_path: Path, folders: dict[str, Path]) -> None:
    save_head(tmp_path / "heads" / "epoch3.pt", seed=5)
    adapter = load(folders["xlmr"], pruning_head_path=str(tmp_path / "heads"), pruning_head_file="epoch3.pt")
    assert adapter._keep_head is not None
    torch.testing.assert_close(adapter._keep_head.up.weight, keep_head(5)[0].weight)


def test_heads_that_do_not_fit_are_refused(tmp_path: Path, folders: dict[str, Path]) -> None:
    folder = folders["xlmr"]
    with pytest.raises(ValueError, match="intermediate_size is 512"):
        load(folder, intermediate_size=512)
    torch.save({"pruning_head": {"classifier.0.weight": torch.zeros(4, 32)}}, tmp_path / "partial.pt")
    with pytest.raises(ValueError, match="missing"):
        load(folder, pruning_head_path=str(tmp_path / "partial.pt"))
    wide = {f"classifier.{k}": v for k, v in torch.nn.Sequential(
        torch.nn.Linear(64, 8), torch.nn.GELU(), torch.nn.Dropout(), torch.nn.Linear(8, 1)
    ).state_dict().items()}  # fmt: skip
    torch.save(wide, tmp_path / "wide.pt")
    with pytest.raises(ValueError, match="reads 64 features, the encoder gives 32"):
        load(folder, pruning_head_path=str(tmp_path / "wide.pt"))
    with pytest.raises(FileNotFoundError):
        load(folder, pruning_head_path=str(tmp_path), pruning_head_file="absent.pt")
    assert (folder / HEAD_FILE).is_file()  # the default: the model's own folder, as the tests above read
