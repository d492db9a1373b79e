"""A stand-in for the Hugging Face Hub: an HTTP server on 127.0.0.1 serving repositories a test
makes, with the endpoints ``huggingface_hub`` calls (no network beyond this machine).

- ``GET /api/models/{org}/{name}/revision/{rev}?blobs=true``: the model info, its ``sha`` and
  ``siblings`` with sizes, blob ids and LFS sha256 (what ``HfApi.model_info(files_metadata=
  True)`` reads); 404 ``RepoNotFound`` / ``RevisionNotFound``, 401 ``GatedRepo``.
- ``HEAD`` / ``GET /{org}/{name}/resolve/{rev}/{file}``: ``X-Repo-Commit``, ``ETag``
  (``X-Linked-Etag`` and ``X-Linked-Size`` for LFS files), ``Content-Length``, byte ranges
  (``Range: bytes=N-`` -> 206 with ``Content-Range``); 404 ``EntryNotFound``.

A gated repository answers only ``Authorization: Bearer <TOKEN>``. ``drop_after[(repo, file)] =
n`` makes the next GET of that file send its headers and ``n`` bytes, then close the connection
(a list: one such break per GET, in turn);
``slow[(repo, file)] = s`` pauses ``s`` seconds after each 4 KiB of it; ``ranges = False``
answers every GET with the whole file (a server without ranges); ``portal = True`` answers
every request with an HTML page (a network's sign-in page); a repository's
``listed_sizes`` and ``listed_etags`` are what its listing says in place of the true sizes
and blob ids.
The server runs on a daemon thread, serves at most ``max_requests`` requests and stops itself
after ``lifetime`` seconds if the test doesn't stop it first (``with StandinHub(...) as hub``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import torch
from safetensors.torch import save_file
from transformers import ViTConfig, ViTForImageClassification

TOKEN = "hf_standin_token"
_API = re.compile(r"^/api/models/([^/]+/[^/]+)(?:/revision/(.+))?$")
_RESOLVE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass
class StandinRepo:
    """A repository: its files (name -> bytes); names ending in a weights suffix are LFS."""

    repo_id: str
    files: dict[str, bytes]
    commit: str = "c0ffee" + "0" * 34
    gated: bool = False
    tags: list[str] = field(default_factory=list)
    damaged: set[str] = field(default_factory=set)  # served with a byte changed
    listed_sizes: dict[str, int] = field(default_factory=dict)  # sizes the listing lies about
    listed_etags: dict[str, str] = field(default_factory=dict)  # blob ids it lies about
    any_revision: bool = False  # every revision asked for is answered with ``commit``

    def is_lfs(self, name: str) -> bool:
        return name.endswith((".safetensors", ".bin", ".pth", ".h5", ".msgpack", ".onnx"))

    def etag(self, name: str) -> str:
        data = self.files[name]
        return hashlib.sha256(data).hexdigest() if self.is_lfs(name) else git_blob_id(data)

    def info(self) -> dict:
        siblings = []
        for name, data in sorted(self.files.items()):
            size = self.listed_sizes.get(name, len(data))
            etag = self.listed_etags.get(name)
            blob_id = etag or git_blob_id(data)
            entry: dict = {"rfilename": name, "size": size, "blobId": blob_id}
            if self.is_lfs(name):
                sha = etag or self.etag(name)
                entry["lfs"] = {"sha256": sha, "size": size, "pointerSize": 134}
            siblings.append(entry)
        return {
            "id": self.repo_id,
            "sha": self.commit,
            "private": False,
            "gated": "manual" if self.gated else False,
            "tags": list(self.tags),
            "siblings": siblings,
        }


class StandinHub:
    """The server (module docstring). ``url`` is what HF_ENDPOINT is set to."""

    def __init__(
        self, repos: list[StandinRepo], lifetime: float = 120.0, max_requests: int = 2000
    ) -> None:
        self.repos = {r.repo_id: r for r in repos}
        self.drop_after: dict[tuple[str, str], int | list[int]] = {}
        self.slow: dict[tuple[str, str], float] = {}  # seconds of pause per 4 KiB sent
        self.ranges = True  # False: a Range header is ignored (200, the whole file)
        self.portal = False  # True: every request answered 200 with an HTML sign-in page
        self.requests: list[tuple[str, str, str]] = []  # (method, path, Range header)
        self.served: dict[tuple[str, str], int] = {}  # body bytes sent, per (repo, file)
        self.max_requests = max_requests
        self.stopped = False
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._timer = threading.Timer(lifetime, self.stop)
        self._timer.daemon = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> StandinHub:
        self._thread.start()
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stopped = True  # open keep-alive connections are closed unanswered
        self._timer.cancel()
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def bytes_served(self, repo_id: str | None = None) -> int:
        with self._lock:
            return sum(n for (r, _), n in self.served.items() if repo_id in (None, r))

    def files_served(self, repo_id: str) -> set[str]:
        with self._lock:
            return {f for (r, f), n in self.served.items() if r == repo_id}


def _handler(hub: StandinHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 20

        def log_message(self, *_: object) -> None:  # quiet
            return

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def _send(self, status: int, headers: dict[str, str], data: bytes, body: bool) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def _error(self, status: int, code: str, body: bool, commit: str | None = None) -> None:
            headers = {"X-Error-Code": code, "Content-Type": "application/json"}
            if commit:
                headers["X-Repo-Commit"] = commit
            self._send(status, headers, json.dumps({"error": code}).encode(), body)

        def _answer(self, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            if hub.stopped:
                self.close_connection = True
                return
            with hub._lock:
                hub.requests.append((self.command, path, self.headers.get("Range", "")))
                over = len(hub.requests) > hub.max_requests
            if over:
                self._error(503, "TooManyRequests", body)
                return
            if hub.portal:
                page = b"<html><body>Sign in to use this network</body></html>"
                self._send(200, {"Content-Type": "text/html"}, page, body)
                return
            if m := _API.match(path):
                self._info(m.group(1), m.group(2) or "main", body)
            elif m := _RESOLVE.match(path):
                self._file(m.group(1), m.group(2), m.group(3), body)
            else:
                self._error(404, "NotFound", body)

        def _repo(self, repo_id: str, body: bool) -> StandinRepo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", body)
                return None
            if repo.gated and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._error(401, "GatedRepo", body)
                return None
            return repo

        def _info(self, repo_id: str, revision: str, body: bool) -> None:
            repo = self._repo(repo_id, body)
            if repo is None:
                return
            if revision not in ("main", repo.commit) and not repo.any_revision:
                self._error(404, "RevisionNotFound", body)
                return
            data = json.dumps(repo.info()).encode()
            self._send(200, {"Content-Type": "application/json"}, data, body)

        def _file(self, repo_id: str, revision: str, name: str, body: bool) -> None:
            repo = self._repo(repo_id, body)
            if repo is None:
                return
            if revision not in ("main", repo.commit):
                self._error(404, "RevisionNotFound", body)
                return
            if name not in repo.files:
                self._error(404, "EntryNotFound", body, commit=repo.commit)
                return
            data, etag = repo.files[name], repo.etag(name)
            headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{etag}"'}
            headers["Accept-Ranges"] = "bytes"
            if repo.is_lfs(name):
                headers |= {"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(data))}
            status, start = 200, 0
            ranged = re.match(r"^bytes=(\d+)-$", self.headers.get("Range", ""))
            if ranged and body and hub.ranges:
                start = int(ranged.group(1))
                if start >= len(data):
                    self._error(416, "RangeNotSatisfiable", body)
                    return
                status = 206
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            if name in repo.damaged:
                data = data[:-1] + bytes([data[-1] ^ 1])
            part = data[start:]
            key = (repo_id, name)
            with hub._lock:
                drop = hub.drop_after.pop(key, None) if body else None
                if isinstance(drop, list):  # one break per GET, in turn
                    if len(drop) > 1:
                        hub.drop_after[key] = drop[1:]
                    drop = drop[0]
            pause = hub.slow.get(key, 0.0)
            if drop is None and pause and body:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(part)))
                self.end_headers()
                sent = 0
                try:
                    for i in range(0, len(part), 4096):
                        self.wfile.write(part[i : i + 4096])
                        self.wfile.flush()
                        sent += len(part[i : i + 4096])
                        time.sleep(pause)
                except OSError:  # the client went away (a cancel)
                    self.close_connection = True
            elif drop is None:
                self._send(status, headers, part, body)
                sent = len(part) if body else 0
            else:  # headers for the whole part, then a broken connection
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(part)))
                self.end_headers()
                self.wfile.write(part[:drop])
                self.wfile.flush()
                sent = min(drop, len(part))
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
            with hub._lock:
                hub.served[key] = hub.served.get(key, 0) + sent

    return Handler


def tiny_vit_files() -> dict[str, bytes]:
    """A tiny transformers ViT as a hub repository holds it: safetensors and a second copy of
    the weights (.bin), a TF file, an ONNX export in a subfolder, a README."""
    torch.manual_seed(0)
    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_labels=3,
    )
    model = ViTForImageClassification(config)
    with torch.no_grad():
        model.classifier.weight.normal_()
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    weights = io.BytesIO()
    torch.save(state, weights)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        folder_config = (Path(tmp) / "config.json").read_bytes()
    prep = {
        "do_resize": True,
        "size": {"height": 32, "width": 32},
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }
    return {
        "config.json": folder_config,
        "preprocessor_config.json": json.dumps(prep).encode(),
        "model.safetensors": _safetensors_bytes(state),
        "pytorch_model.bin": weights.getvalue(),
        "tf_model.h5": b"\x89HDF" + b"\0" * 5000,
        "onnx/model.onnx": b"onnx" * 1000,
        "README.md": b"# tiny vit\n",
        ".gitattributes": b"*.bin filter=lfs\n",
    }


def _safetensors_bytes(state: dict[str, torch.Tensor]) -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.safetensors"
        save_file(state, path, metadata={"format": "pt"})
        return path.read_bytes()
