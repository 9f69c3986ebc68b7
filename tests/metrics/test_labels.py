from __future__ import annotations

import pytest

from sie.metrics.labels import (
    CODES,
    LATENCY_BUCKETS_S,
    ROUTES,
    STATUSES,
    bucket,
    code_index,
    route_index,
    route_of,
    status_index,
    status_label,
)


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/v1/encode/BAAI/bge-m3:sparse", "encode"),
        ("/v1/score/x", "score"),
        ("/v1/extract/a/b", "extract"),
        ("/v1/embeddings", "embeddings"),
        ("/v1/audio/transcriptions", "transcriptions"),
        ("/v1/audio/translations", "other"),
        ("/v1/rerank", "rerank"),
        ("/v2/rerank", "rerank"),
        ("/v1/models/any/model", "models"),
        ("/v1/whatever", "other"),
        ("/readyz", "health"),
        ("/metrics", "metrics"),
        ("/version", "version"),
        ("/openapi.json", "openapi"),
        ("/favicon.ico", "other"),
    ],
)
def test_route_of_never_takes_the_model_into_the_label(path: str, route: str) -> None:
    assert route_of(path) == route


def test_values_outside_the_tables_count_as_other() -> None:
    assert route_index("nope") == ROUTES.index("other")
    assert status_index(418) == len(STATUSES)
    assert status_label(status_index(418)) == "other"
    assert status_label(status_index(503)) == "503"
    assert code_index("SOMETHING_NEW") == code_index("OTHER")


def test_bucket_is_prometheus_le() -> None:
    assert bucket(LATENCY_BUCKETS_S, 0.0) == 0
    assert bucket(LATENCY_BUCKETS_S, 0.001) == 0  # le="0.001" includes 0.001
    assert bucket(LATENCY_BUCKETS_S, 0.0011) == 1
    assert bucket(LATENCY_BUCKETS_S, 1e9) == len(LATENCY_BUCKETS_S)  # the +Inf bucket


def test_every_error_code_has_its_own_label() -> None:
    import sie.errors

    codes = {
        cls.code
        for cls in vars(sie.errors).values()
        if isinstance(cls, type) and issubclass(cls, sie.errors.SieError)
    }
    assert codes - {"UNAUTHORIZED"} <= set(CODES) - {"OTHER"}, codes - set(CODES)
