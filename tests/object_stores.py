"""Object stores for tests, on loopback ports: moto's S3 server (counting the requests it answers)
and a GCS emulator; Hugging Face cache snapshots uploaded to them; and a TCP proxy that slows or
cuts the bytes between a server and a store."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

# Nothing may leave loopback: neither SDK looks for instance metadata, and gcsfs does not probe the
# bucket type over gRPC (its experimental extension, which no local fake answers).
LOOPBACK_ONLY = {
    "AWS_EC2_METADATA_DISABLED": "true",
    "NO_GCE_CHECK": "true",
    "GCE_METADATA_HOST": "127.0.0.1:9",
    "GCE_METADATA_IP": "127.0.0.1:9",
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
}


REQUEST_LINE = re.compile(rb"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/1\.1$")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MotoS3:
    """moto's S3 server in a thread of this process; `requests` lists (method, path) it answered."""

    def __init__(self) -> None:
        import s3fs
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        s3fs.S3FileSystem.clear_instance_cache()  # fsspec keeps one client per process: not an old server's
        app = DomainDispatcherApplication(create_backend_app)
        self.requests: list[tuple[str, str]] = []

        def counting(environ: dict[str, Any], start_response: Any) -> Any:
            self.requests.append((environ["REQUEST_METHOD"], environ["PATH_INFO"]))
            return app(environ, start_response)

        self._server = make_server("127.0.0.1", 0, counting, True, request_handler=MotoRequestHandler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """What a process needs to reach it through the SDK's own chain (or through a proxy)."""
        return {
            "AWS_ENDPOINT_URL": endpoint or self.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            **LOOPBACK_ONLY,
        }

    def fs(self) -> Any:
        import fsspec

        return fsspec.filesystem(
            "s3", endpoint_url=self.url, key="testing", secret="testing", skip_instance_cache=True
        )

    def bucket(self) -> str:
        name = "sie-" + secrets.token_hex(6)
        self.fs().mkdir(name)
        return name

    def gets(self, path_suffix: str) -> int:
        return sum(1 for method, path in self.requests if method == "GET" and path.endswith(path_suffix))

    @contextlib.contextmanager
    def checking_credentials(self) -> Iterator[None]:
        """Within: every request is authenticated against moto's IAM, which knows no key (the keys
        of `env()` are then wrong ones)."""
        import httpx

        httpx.post(f"{self.url}/moto-api/reset-auth", content=b"0").raise_for_status()
        try:
            yield
        finally:
            httpx.post(f"{self.url}/moto-api/reset-auth", content=b"inf").raise_for_status()

    def stop(self) -> None:
        self._server.shutdown()


class GcsEmulator:
    """gcp-storage-emulator's GCS JSON API in threads of this process, data in memory."""

    def __init__(self) -> None:
        from gcp_storage_emulator.server import create_server

        # gcsfs and google-auth read these once, when first imported: set them for this process first.
        os.environ.update(LOOPBACK_ONLY)
        import gcsfs

        if gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem:
            raise RuntimeError("gcsfs was imported before its GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT was set")
        gcsfs.GCSFileSystem.clear_instance_cache()
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = create_server("127.0.0.1", self.port, in_memory=True)
        self._server.start()

    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.url, **LOOPBACK_ONLY}

    def fs(self) -> Any:
        import fsspec

        return fsspec.filesystem(
            "gs", endpoint_url=self.url, token="anon", project="test", skip_instance_cache=True
        )

    def bucket(self) -> str:
        name = "sie-" + secrets.token_hex(6)
        self.fs().mkdir(name)
        return name

    def stop(self) -> None:
        self._server.stop()


def upload_snapshot(
    fs: Any, root: str, hf_id: str, folder: Path, *, commit: str | None = None, ref: str | None = "main"
) -> str:
    """Put `folder` into a Hugging Face cache layout under `root` (bucket/prefix, no scheme), as SIE's
    tooling does: `models--ORG--NAME/snapshots/COMMIT/...` and `refs/REF`; the commit."""
    commit = commit or secrets.token_hex(20)
    repo = f"{root}/models--{hf_id.replace('/', '--')}"
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        fs.put_file(str(path), f"{repo}/snapshots/{commit}/{path.relative_to(folder).as_posix()}")
    if ref is not None:
        fs.pipe_file(f"{repo}/refs/{ref}", commit.encode())
    return commit


class Proxy:
    """A TCP proxy on loopback in front of `port`: passes bytes through, or sends the store's replies
    at `rate` bytes per second, or cuts each connection after `cut_after` bytes of reply. `requests`
    lists the (method, unquoted path) of each HTTP request it passed."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.rate: float | None = None
        self.cut_after: int | None = None
        self.requests: list[tuple[str, str]] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def gets(self, path_part: str) -> int:
        return sum(1 for method, path in self.requests if method == "GET" and path_part in path)

    def _pipe(self, src: socket.socket, dst: socket.socket, reply: bool) -> None:
        sent = 0
        pending = b""  # the start of a request line split across reads
        try:
            while chunk := src.recv(64 * 1024):
                if not reply:
                    *lines, pending = (pending + chunk).split(b"\r\n")
                    for line in lines:
                        if match := REQUEST_LINE.match(line):
                            self.requests.append((match[1].decode(), unquote(match[2].decode())))
                    pending = pending[-8192:]
                if reply and self.cut_after is not None and sent + len(chunk) > self.cut_after:
                    dst.sendall(chunk[: max(0, self.cut_after - sent)])
                    break
                dst.sendall(chunk)
                sent += len(chunk)
                if reply and self.rate:
                    time.sleep(len(chunk) / self.rate)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
