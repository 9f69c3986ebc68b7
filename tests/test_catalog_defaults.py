"""Server-wide budget and precision fill what a model's profile leaves open, and nothing else."""

from __future__ import annotations

from sie.catalog import Catalog
from sie.catalog_defaults import with_server_defaults
from sie.model_config import DEFAULT_MAX_BATCH_TOKENS, parse_model_config
from sie.settings import Settings


def catalog() -> Catalog:
    open_ = parse_model_config({"sie_id": "a/open", "adapter": "dense"})
    pinned = parse_model_config(
        {
            "sie_id": "b/pinned",
            "profiles": {
                "default": {"adapter": "dense", "max_batch_tokens": 512, "compute_precision": "float32"},
                "other": {"adapter": "dense"},
            },
        }
    )
    return Catalog([open_, pinned])


def test_no_server_defaults_leave_the_catalog_alone() -> None:
    original = catalog()
    assert with_server_defaults(original, Settings()) is original


def test_open_fields_take_the_server_defaults() -> None:
    settings = Settings(max_batch_tokens=2048, default_compute_precision="bfloat16")
    result = with_server_defaults(catalog(), settings)
    assert result.names() == ["a/open", "b/pinned"]
    assert result.get("a/open").profile().max_batch_tokens == 2048
    assert result.get("a/open").profile().compute_precision == "bfloat16"
    pinned = result.get("b/pinned")
    assert (pinned.profile().max_batch_tokens, pinned.profile().compute_precision) == (512, "float32")
    assert (pinned.profile("other").max_batch_tokens, pinned.profile("other").compute_precision) == (
        2048,
        "bfloat16",
    )
    assert (
        with_server_defaults(catalog(), Settings(max_batch_tokens=1))
        .get("a/open")
        .profile()
        .compute_precision
        is None
    )
    assert catalog().get("a/open").profile().max_batch_tokens == DEFAULT_MAX_BATCH_TOKENS
