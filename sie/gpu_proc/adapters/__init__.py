"""Model adapters, one per family; `load_adapter` picks one from a model's config."""

from sie.gpu_proc.adapters.base import Adapter, load_adapter

__all__ = ["Adapter", "load_adapter"]
