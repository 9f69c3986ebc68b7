"""Object-store URLs (`s3://`, `gs://`, `file://`) through fsspec: which library serves a scheme, the
filesystem for a URL, and the models directory's YAML files read from one.

Credentials come from each SDK's own chain (environment, config files, instance roles); nothing here
takes or logs one. The cloud libraries are an optional extra: without them a URL setting stops the
start with the command that installs them.
"""

from __future__ import annotations

import importlib
import logging
import posixpath
from typing import Any
from urllib.parse import unquote, urlsplit

INSTALL_HINT = "pip install 'sie[cloud]'"
# scheme -> the fsspec implementation's package (None: built into fsspec)
BACKENDS: dict[str, str | None] = {"s3": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "file": None}
QUIET_LOGGERS = ("botocore", "aiobotocore", "s3fs", "gcsfs", "google")


class ObjectStoreError(ValueError):
    """A URL this server cannot read: unknown scheme, library missing, or the store refused."""


def is_url(value: str | None) -> bool:
    """True for `scheme://...` (a plain path, even one with a colon, is not a URL)."""
    return value is not None and "://" in value and urlsplit(value).scheme.isidentifier()


def local_path(value: str) -> str:
    """A `file://` URL as the path it names; anything else unchanged."""
    parts = urlsplit(value)
    return unquote(parts.path) if parts.scheme == "file" else value


def is_remote(value: str | None) -> bool:
    """A URL read through a cloud library (not a local path, not `file://`)."""
    return value is not None and is_url(value) and urlsplit(value).scheme != "file"


def require_backend(url: str, setting: str) -> None:
    """Stop the start when the URL's scheme is unknown or its library is not installed."""
    scheme = urlsplit(url).scheme
    if scheme not in BACKENDS:
        known = ", ".join(f"{s}://" for s in BACKENDS)
        raise ObjectStoreError(f"{setting}={url}: unsupported scheme {scheme}:// (use {known})")
    for package in ("fsspec", BACKENDS[scheme]):
        if package is None:
            continue
        try:
            importlib.import_module(package)
        except ImportError:
            raise ObjectStoreError(
                f"{setting}={url} needs the cloud storage libraries ({package} is missing): {INSTALL_HINT}"
            ) from None


def open_url(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, the URL's path in it without a trailing slash)."""
    import fsspec

    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        for name in QUIET_LOGGERS:  # "found credentials in ...", per client: noise in a service's log
            logging.getLogger(name).setLevel(logging.WARNING)
    scheme = urlsplit(url).scheme
    fs, path = fsspec.core.url_to_fs(url if scheme != "gcs" else "gs" + url[3:])
    return fs, path.rstrip("/")


def join(*parts: str) -> str:
    return posixpath.join(*parts)


def read_yaml_files(url: str) -> dict[str, str]:
    """Every `*.yaml` directly under the URL, as {its URL: its text}; ObjectStoreError if the URL is
    not a readable directory (missing bucket, refused credentials, a file, nothing there)."""
    require_backend(url, "SIE_MODELS_DIR")
    fs, root = open_url(url)
    scheme = urlsplit(url).scheme
    try:
        fs.invalidate_cache()  # a SIGHUP re-read must see the store as it is now
        entries = fs.ls(root, detail=True)
    except FileNotFoundError:
        raise ObjectStoreError(f"models directory {url} does not exist") from None
    except Exception as exc:  # any store error (credentials, network) stops the read with its reason
        raise ObjectStoreError(f"models directory {url} is not readable: {_reason(exc)}") from None
    if len(entries) == 1 and entries[0]["type"] == "file" and entries[0]["name"].rstrip("/") == root:
        raise ObjectStoreError(f"models directory {url} is a file, not a directory of YAML files")
    names = sorted(e["name"] for e in entries if e["type"] == "file" and e["name"].endswith(".yaml"))
    try:
        texts = fs.cat(names) if names else {}
    except Exception as exc:
        raise ObjectStoreError(f"models directory {url}: a file is not readable: {_reason(exc)}") from None
    return {f"{scheme}://{name}": data.decode(errors="replace") for name, data in sorted(texts.items())}


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
