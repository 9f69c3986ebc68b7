"""LoraSet's failed loads: an adapter file that is cut short or lacks tensors fails its own load and
leaves the served module as it was, whether it was the first adapter injected or a later one."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from sie.gpu_proc.lora import LoraSet

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


def tiny_bert() -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
    )
    return BertModel(config).eval()


def save_lora(base: torch.nn.Module, folder: Path, seed: int) -> Path:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    config = LoraConfig(r=2, target_modules=["query", "value"], init_lora_weights=False)
    get_peft_model(copy.deepcopy(base), config).save_pretrained(folder)
    return folder


def reference(base: torch.nn.Module, adapter: Path | None, ids: torch.Tensor) -> torch.Tensor:
    """PEFT's own model of `base` + `adapter` (or `base` alone), on a copy of the weights."""
    from peft import PeftModel

    model = copy.deepcopy(base)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter).eval()
    with torch.no_grad():
        return model(input_ids=ids).last_hidden_state


def run(loras: LoraSet, name: str | None, ids: torch.Tensor) -> torch.Tensor:
    with loras.applied(name), torch.no_grad():
        return loras.module(input_ids=ids).last_hidden_state


IDS = torch.tensor([[1, 5, 7, 9, 2]])


@pytest.fixture
def adapters(tmp_path: Path) -> tuple[torch.nn.Module, dict[str, str]]:
    base = tiny_bert()
    good = save_lora(base, tmp_path / "good", seed=1)
    cut = save_lora(base, tmp_path / "cut", seed=2)
    weights = cut / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    partial = save_lora(base, tmp_path / "partial", seed=3)
    tensors = load_file(partial / "adapter_model.safetensors")
    save_file(
        {k: v for k, v in tensors.items() if "layer.1." not in k}, partial / "adapter_model.safetensors"
    )
    return base, {"good": str(good), "cut": str(cut), "partial": str(partial)}


@pytest.mark.parametrize("broken", ["cut", "partial"])
def test_a_failed_first_load_leaves_the_module_as_it_was(
    adapters: tuple[torch.nn.Module, dict[str, str]], broken: str
) -> None:
    base, paths = adapters
    loras = LoraSet(copy.deepcopy(base), paths, capacity=2)
    loras.load(broken)
    assert not loras.is_loaded(broken) and loras.failure(broken, cooldown_s=60) is not None
    assert torch.allclose(run(loras, None, IDS), reference(base, None, IDS), atol=1e-6)
    loras.load("good")
    assert torch.allclose(run(loras, "good", IDS), reference(base, Path(paths["good"]), IDS), atol=1e-5)


@pytest.mark.parametrize("broken", ["cut", "partial"])
def test_a_failed_later_load_leaves_the_loaded_adapters_as_they_were(
    adapters: tuple[torch.nn.Module, dict[str, str]], broken: str
) -> None:
    base, paths = adapters
    loras = LoraSet(copy.deepcopy(base), paths, capacity=2)
    loras.load("good")
    loras.load(broken)
    assert loras.failure(broken, cooldown_s=60) is not None
    if broken == "partial":
        assert "lack" in str(loras.failure(broken, cooldown_s=60))
    assert torch.allclose(run(loras, "good", IDS), reference(base, Path(paths["good"]), IDS), atol=1e-5)
    assert torch.allclose(run(loras, None, IDS), reference(base, None, IDS), atol=1e-6)
    loras.load(broken)  # a retry after the cool-down finds no half-made adapter in the way
    assert loras.failure(broken, cooldown_s=60) is not None
