"""The bridge's client pieces against a live `vla-server serve` (demo model).

Edge hashing is proven through the server itself: the server keys its prefix cache (the image's
pad ids derive from the hash) and its vision-embedding cache by the image hash. A request
carrying the bridge's hash for an image the server has just hashed itself reuses the cached
prefix through the image, without running the vision encoder; the same image with any other
hash shares no image prefix and is encoded again (an embedding-cache miss).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import httpx
import numpy as np
import psutil
import pytest

from ros_bridge.bags import raw_frame, read_frames
from ros_bridge.bench_bridge import flush_cache
from ros_bridge.frame_input import PreparedImage, prepare_image
from ros_bridge.stream_client import VlaStreamClient
from tests.e2e.test_replay_latency import BAG
from tests.server_process import run_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with run_server(None, tmp_path_factory.mktemp("server")) as s:
        yield s


def mm_info(server) -> dict[str, Any]:
    return httpx.get(server.url + "/get_server_info", timeout=30).json()["mm"]


async def last_chunk(client: VlaStreamClient, body: dict[str, Any]) -> Any:
    chunks = [c async for c in client.stream(body)]
    return chunks[-1]


def generate(server, image: PreparedImage, mm_hash: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "text": "pick up the cube",
        "stream": True,
        "image_data": [image.image_data],
        "num_actions": 1,
        "unnorm_key": "aloha_left",
        "sampling_params": {"temperature": 0.0},
    }
    if mm_hash is not None:
        body["mm_hashes"] = [mm_hash]

    async def run() -> dict[str, Any]:
        client = VlaStreamClient(server.url)
        try:
            return (await last_chunk(client, body)).meta
        finally:
            await client.aclose()

    return asyncio.run(run())


def camera_images() -> list[PreparedImage]:
    jpeg = next(iter(read_frames(BAG)))
    bgr = np.random.default_rng(5).integers(0, 256, size=(120, 160, 3), dtype=np.uint8)
    raw = dataclasses.replace(raw_frame("/c", 1, bgr, "bgr8"))
    return [prepare_image(jpeg, None), prepare_image(raw, None)]


@pytest.mark.parametrize("kind", [0, 1], ids=["compressed_jpeg", "raw_bgr8"])
def test_bridge_hash_is_the_hash_the_server_computes(server, kind: int) -> None:
    digest = bytes.fromhex(mm_info(server)["preprocess_digest"])
    image = camera_images()[kind].with_digest(digest)
    flush_cache(server.url)
    n_image_tokens = mm_info(server)["num_image_tokens"]
    generate(server, image, None)  # the server hashes the pixels itself
    before = mm_info(server)["embedding_cache"]
    same = generate(server, image, image.mm_hash)  # the bridge's hash
    after_same = mm_info(server)["embedding_cache"]
    other = f"{int(image.mm_hash, 16) ^ 1:032x}"
    different = generate(server, image, other)
    after_other = mm_info(server)["embedding_cache"]
    # Same hash: the prompt prefix through the image is reused, the vision encoder never runs.
    assert same["cached_tokens"] >= n_image_tokens
    assert after_same["misses"] == before["misses"]
    assert after_other["misses"] == after_same["misses"] + 1
    assert different["cached_tokens"] < n_image_tokens


def test_keep_alive_one_connection_for_many_streams(server) -> None:
    body = {
        "text": "hello",
        "stream": True,
        "sampling_params": {"max_new_tokens": 5, "temperature": 0.0},
    }

    def client_ports() -> set[int]:
        conns = psutil.Process(server.proc.pid).net_connections(kind="tcp")
        return {
            c.raddr.port
            for c in conns
            if c.laddr.port == server.port and c.status == psutil.CONN_ESTABLISHED and c.raddr
        }

    async def run() -> list[set[int]]:
        client = VlaStreamClient(server.url)
        seen = []
        try:
            for _ in range(3):
                chunks = [c async for c in client.stream(body)]
                assert sum(c.n_tokens for c in chunks) == 5
                assert chunks[-1].finish_reason["type"] == "length"
                seen.append(client_ports())
        finally:
            await client.aclose()
        return seen

    seen = asyncio.run(run())
    assert len(seen[0]) == 1 and seen[0] == seen[1] == seen[2]
