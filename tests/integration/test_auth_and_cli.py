"""`--api-key` guards every route but the health checks; the CLI writes the demo checkpoint."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import httpx

from tests.helpers.server import run_server


def test_api_key_is_required_except_for_health(llama_path, tmp_path):
    with run_server(llama_path, tmp_path, "--max-total-tokens", "1024", api_key="s3cret") as server:
        bare = httpx.Client(base_url=server.url, timeout=60)
        assert bare.get("/health").status_code == 200
        body = {"text": "pick", "sampling_params": {"max_new_tokens": 2}}
        for path, method in (
            ("/generate", "post"),
            ("/get_server_info", "get"),
            ("/metrics", "get"),
        ):
            r = getattr(bare, method)(path, **({"json": body} if method == "post" else {}))
            assert r.status_code == 401 and r.json()["error"]["field"] == "authorization", path
        wrong = bare.post("/generate", json=body, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        with server.client() as c:  # sends the right bearer token
            assert c.post("/generate", json=body).status_code == 200
            assert c.get("/get_server_info").json()["api_key"] == "***"


def _digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_make_demo_model_cli_is_deterministic(tmp_path):
    for name in ("a", "b"):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "vla_server.entrypoints.cli",
                "make-demo-model",
                str(tmp_path / name),
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
    a, b = _digest(tmp_path / "a"), _digest(tmp_path / "b")
    assert a == b
    assert {"config.json", "model.safetensors", "tokenizer.json", "action_tokenizer.json"} <= set(a)
