"""Cross-encoder scoring: activation choice, per-item scores, ranking, and pair truncation, each
checked against sentence-transformers' CrossEncoder on the same folder."""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.frontend.scoring import activate, activation_of, item_scores, rank
from sie.frontend.tokenize import TextTokenizer
from tests.tiny_models.cross_encoder import make_cross_encoder

IDENTITY = "torch.nn.modules.linear.Identity"
SIGMOID = "torch.nn.modules.activation.Sigmoid"
SOFTMAX = "torch.nn.modules.activation.Softmax"


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Tiny BERT cross-encoders with 1, 2 and 3 labels."""
    return {n: make_cross_encoder(tmp_path_factory.mktemp(f"labels{n}"), num_labels=n) for n in (1, 2, 3)}


def cross_encoder(folder: Path, **kwargs: Any) -> Any:
    from sentence_transformers import CrossEncoder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CrossEncoder(str(folder), device="cpu", local_files_only=True, **kwargs)


def edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    edit(data)
    path.write_text(json.dumps(data))


def st_config(path: str | None) -> Callable[[dict[str, Any]], None]:
    return lambda c: c.update(sentence_transformers={"activation_fn": path})


def old_config(path: str) -> Callable[[dict[str, Any]], None]:
    return lambda c: c.update(sbert_ce_default_activation_function=path)


def no_labels(count: int | None) -> Callable[[dict[str, Any]], None]:
    def edit(c: dict[str, Any]) -> None:
        # transformers leaves them out of config.json for two labels, its default.
        c.pop("id2label", None), c.pop("label2id", None)
        if count is not None:
            c["num_labels"] = count

    return edit


def both(*edits: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def edit_all(c: dict[str, Any]) -> None:
        for edit in edits:
            edit(c)

    return edit_all


# (case, labels, config.json edit, activation saved by a v6 CrossEncoder.save (None: not saved))
CASES: list[tuple[str, int, Callable[[dict[str, Any]], None] | None, str | None]] = [
    ("one-label", 1, None, None),
    ("three-labels", 3, None, None),
    ("two-labels-implicit", 2, no_labels(None), None),
    ("num-labels-key", 1, no_labels(1), None),
    ("st-identity", 1, st_config(IDENTITY), None),
    ("st-softmax", 3, st_config(SOFTMAX), None),
    ("st-sigmoid-multi", 3, st_config("torch.nn.Sigmoid"), None),
    ("st-untrusted", 1, st_config("mypackage.Activation"), None),
    ("st-null-hides-old", 1, both(st_config(None), old_config(IDENTITY)), None),
    ("old-identity", 1, old_config(IDENTITY), None),
    ("old-untrusted", 3, old_config("mypackage.Activation"), None),
    ("saved-identity", 1, None, IDENTITY),
    ("saved-wins-over-config", 1, st_config(SIGMOID), IDENTITY),
    ("saved-softmax", 2, None, SOFTMAX),
]


@pytest.mark.parametrize(("case", "n_labels", "edit", "saved"), CASES, ids=[c[0] for c in CASES])
def test_activation_as_cross_encoder_decides(
    bases: dict[int, Path],
    tmp_path: Path,
    case: str,
    n_labels: int,
    edit: Callable[[dict[str, Any]], None] | None,
    saved: str | None,
) -> None:
    folder = tmp_path / case
    if saved is None:
        shutil.copytree(bases[n_labels], folder)
    else:
        import torch

        activation = {IDENTITY: torch.nn.Identity, SOFTMAX: torch.nn.Softmax}[saved]()
        cross_encoder(bases[n_labels], activation_fn=activation).save(str(folder))
        assert (
            json.loads((folder / "config_sentence_transformers.json").read_text())["activation_fn"] == saved
        )
    if edit is not None:
        edit_json(folder / "config.json", edit)
    want = type(cross_encoder(folder).activation_fn).__name__.lower()
    assert activation_of(folder, None) == want


def test_saved_activation_needs_modules_json(bases: dict[int, Path], tmp_path: Path) -> None:
    folder = tmp_path / "loose"
    shutil.copytree(bases[1], folder)
    edit_json(folder / "config_sentence_transformers.json", lambda c: c.update(activation_fn=IDENTITY))
    edit_json(folder / "config_sentence_transformers.json", lambda c: c.update(model_type="CrossEncoder"))
    assert activation_of(folder, None) == type(cross_encoder(folder).activation_fn).__name__.lower()
    assert activation_of(folder, None) == "sigmoid"


def test_configured_activation_wins(bases: dict[int, Path]) -> None:
    assert activation_of(bases[1], "identity") == "identity"
    assert activation_of(bases[3], "softmax") == "softmax"
    with pytest.raises(ValueError, match="unknown activation"):
        activation_of(bases[1], "tanh")


def test_unsupported_torch_activation_falls_back(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"sentence_transformers": {"activation_fn": "torch.nn.Tanh"}})
    )
    assert activation_of(tmp_path, None) == "identity"  # no id2label: transformers assumes two labels


def test_activations_match_torch() -> None:
    import torch

    logits = np.random.default_rng(0).normal(0, 30, (64, 3)).astype(np.float32)
    logits[0] = [-1000, 0, 1000]  # no overflow warnings (warnings are errors here)
    tensor = torch.from_numpy(logits)
    np.testing.assert_allclose(activate(logits, "sigmoid"), torch.sigmoid(tensor).numpy(), rtol=0, atol=1e-7)
    np.testing.assert_allclose(
        activate(logits, "softmax"), torch.softmax(tensor, 1).numpy(), rtol=0, atol=1e-7
    )
    assert np.array_equal(activate(logits, "identity"), logits)


def test_item_scores_per_label_count() -> None:
    one = np.array([[0.0], [2.0], [-2.0]], np.float32)
    np.testing.assert_allclose(item_scores(one, "sigmoid"), [0.5, 0.880797, 0.119203], atol=1e-6)
    np.testing.assert_allclose(item_scores(one[:, 0], "identity"), [0.0, 2.0, -2.0])  # 1-D accepted
    two = np.array([[1.0, 3.0], [2.0, 0.0]], np.float32)
    np.testing.assert_allclose(item_scores(two, "identity"), [3.0, 0.0])
    np.testing.assert_allclose(item_scores(two, "softmax"), [0.880797, 0.119203], atol=1e-6)


def test_rank_descending_and_stable_for_ties() -> None:
    scores = np.array([0.2, 0.9, 0.2, 0.5, 0.9], np.float32)
    ranked = rank(scores, ["a", "b", "c", "d", "e"])
    assert [r["item_id"] for r in ranked] == ["b", "e", "d", "a", "c"]
    assert [r["rank"] for r in ranked] == [0, 1, 2, 3, 4]
    assert ranked[0]["score"] == pytest.approx(0.9) and isinstance(ranked[0]["score"], float)
    assert rank(np.zeros(0, np.float32), []) == []
    with pytest.raises(ValueError, match="2 scores for 1 items"):
        rank(scores[:2], ["a"])


WORDS = "the cat sat on a mat while unbelievably-long-hyphenated words ran away 123 , ; !"


def text_of(n_words: int, seed: int) -> str:
    words = WORDS.split()
    rng = np.random.default_rng(seed)
    return " ".join(words[i] for i in rng.integers(0, len(words), n_words))


# (query words, doc words): under the limit, one side over, both over (equal and not), a side past
# TextTokenizer's character cut (16 characters a token), and a side longer than the whole budget.
LENGTHS = [
    (5, 40),
    (5, 900),
    (900, 5),
    (400, 400),
    (300, 500),
    (260, 250),
    (3000, 20),
    (20, 3000),
    (1200, 1500),
]


@pytest.mark.parametrize("max_length", [512, 129, 64])
def test_pair_truncation_matches_cross_encoder(bases: dict[int, Path], max_length: int) -> None:
    model = cross_encoder(bases[1], max_length=max_length)
    assert model.max_seq_length == max_length
    tokenizer = TextTokenizer(bases[1] / "tokenizer.json", max_length)
    for seed, (n_query, n_doc) in enumerate(LENGTHS):
        query, doc = text_of(n_query, seed), text_of(n_doc, seed + 100)
        want = model.preprocess([[query, doc]])
        got = tokenizer.encode_pairs([query], [doc])
        assert got.input_ids.tolist() == want["input_ids"][0].tolist(), (n_query, n_doc)
        assert got.token_type_ids is not None
        assert got.token_type_ids.tolist() == want["token_type_ids"][0].tolist(), (n_query, n_doc)
