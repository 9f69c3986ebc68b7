"""Models that run their own modeling code (`trust_remote_code: true` in the YAML, never a request).

The fabricated model calls itself `bert`, as JinaBERT and the GTE checkpoints do, but computes
differently: a loader that fell back on transformers' native BertModel, or packed it as one, would
give other numbers (or random weights) without an error.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.common import ModelCodeRequired
from sie.gpu_proc.adapters.dense import DenseAdapter
from sie.gpu_proc.runner import Runner
from sie.model_config import ModelConfigError, parse_model_config

from .tiny import as_batch, random_items

pytestmark = pytest.mark.usefixtures("deterministic_torch")

CONFIGURATION = """
from transformers import PretrainedConfig


class ToyConfig(PretrainedConfig):
    model_type = "bert"

    def __init__(self, vocab_size=100, hidden_size=16, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        super().__init__(**kwargs)
"""

MODELING = """
import torch
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from .configuration_toy import ToyConfig


class ToyModel(PreTrainedModel):
    config_class = ToyConfig
    base_model_prefix = "toy"

    def __init__(self, config):
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.mix = torch.nn.Linear(config.hidden_size, config.hidden_size)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, **kwargs):
        hidden = self.embed(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        context = (hidden * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True)
        return BaseModelOutput(last_hidden_state=torch.tanh(self.mix(hidden + context)))
"""

AUTO_MAP = {"AutoConfig": "configuration_toy.ToyConfig", "AutoModel": "modeling_toy.ToyModel"}


def _fabricate(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "configuration_toy.py").write_text(CONFIGURATION)
    (folder / "modeling_toy.py").write_text(MODELING)
    config = transformers.AutoConfig.from_pretrained(_bare_config(folder), trust_remote_code=True)
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config, trust_remote_code=True)
    model.save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    saved["auto_map"] = AUTO_MAP
    (folder / "config.json").write_text(json.dumps(saved))
    return folder


def _bare_config(folder: Path) -> Path:
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "auto_map": AUTO_MAP}))
    return folder


def _config(trusted: bool) -> object:
    loadtime = {"trust_remote_code": True} if trusted else {}
    profile = {"adapter": "dense", "adapter_options": {"loadtime": loadtime, "runtime": {"pooling": "mean"}}}
    return parse_model_config({"sie_id": "tiny/toy", "profiles": {"default": profile}})


def test_own_code_runs_when_the_yaml_allows_it(tmp_path: Path) -> None:
    folder = _fabricate(tmp_path / "toy")
    adapter = load_adapter(_config(trusted=True), folder, "cpu")  # type: ignore[arg-type]
    assert isinstance(adapter, DenseAdapter)
    assert not adapter.is_padding_free  # its model_type says bert, but it is not transformers' BERT
    items = random_items(9, seed=3)
    got = Runner(torch.device("cpu")).run_dense(adapter, as_batch(items))
    reference = transformers.AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(reference).__name__ == "ToyModel"
    with torch.no_grad():
        want = np.stack(
            [
                reference(input_ids=torch.from_numpy(ids.astype(np.int64))[None])
                .last_hidden_state[0]
                .mean(0)
                .numpy()
                for ids in items
            ]
        )
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_own_code_is_refused_unless_the_yaml_allows_it(tmp_path: Path) -> None:
    folder = _fabricate(tmp_path / "toy")
    with pytest.raises(ModelCodeRequired, match="trust_remote_code"):
        load_adapter(_config(trusted=False), folder, "cpu")  # type: ignore[arg-type]


def test_own_code_that_fails_on_import_fails_that_load(tmp_path: Path) -> None:
    # Copied under a name never imported in this process, so loading it executes the broken file.
    broken = tmp_path / "broken_toy"
    shutil.copytree(_fabricate(tmp_path / "good_toy"), broken)
    (broken / "modeling_toy.py").write_text("raise RuntimeError('modeling file is broken')\n")
    folder = broken
    with pytest.raises(RuntimeError, match="modeling file is broken"):
        load_adapter(_config(trusted=True), folder, "cpu")  # type: ignore[arg-type]


def _code_repo(cache: Path, repo: str, revision: str, modeling: str) -> None:
    """A code repository's snapshot in a Hugging Face cache, as `hf download` leaves it."""
    snapshot = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "configuration_toy.py").write_text(CONFIGURATION)
    (snapshot / "modeling_toy.py").write_text(modeling)


def test_code_revision_pins_the_code_repository_an_auto_map_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # jina-colbert-v2's config.json takes its model class from another repository
    # (`jinaai/xlm-roberta-flash-implementation--...`); SIE's YAML pins that repository's commit
    # (`loadtime.code_revision`). Two commits of the code, computing differently: the pinned one runs.
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as the supervisor sets it without --hf-fallback
    old, new = "a" * 40, "b" * 40
    _code_repo(cache, "tiny/toy-code", old, MODELING)
    _code_repo(cache, "tiny/toy-code", new, MODELING.replace("torch.tanh(", "torch.sigmoid("))
    folder = _fabricate(tmp_path / "toy")
    for name in ("configuration_toy.py", "modeling_toy.py"):
        (folder / name).unlink()  # the folder holds weights only; its code is the other repository's
    saved = json.loads((folder / "config.json").read_text())
    saved["auto_map"] = {key: f"tiny/toy-code--{value}" for key, value in AUTO_MAP.items()}
    (folder / "config.json").write_text(json.dumps(saved))
    items = random_items(5, seed=4)

    def encode(revision: str) -> np.ndarray:
        loadtime = {"trust_remote_code": True, "code_revision": revision}
        profile = {
            "adapter": "dense",
            "adapter_options": {"loadtime": loadtime, "runtime": {"pooling": "mean"}},
        }
        config = parse_model_config({"sie_id": "tiny/toy", "profiles": {"default": profile}})
        adapter = load_adapter(config, folder, "cpu")
        return Runner(torch.device("cpu")).run_dense(adapter, as_batch(items))  # type: ignore[arg-type]

    with_old, with_new = encode(old), encode(new)
    assert (with_old < 0).any()  # tanh: the old code's output
    assert (with_new > 0).all()  # sigmoid: the new code's
    assert np.abs(with_old - with_new).max() > 1e-2
    # A commit not in the cache: the error says how to put it there (nothing is looked for online).
    with pytest.raises(ModelConfigError, match=r"hf download tiny/toy-code --revision c{40}"):
        encode("c" * 40)
