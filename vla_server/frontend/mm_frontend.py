"""The main process's multimodal work for one request: images (decoded, hashed and preprocessed
in a thread pool, off the event loop) and placeholder expansion. Where the images go and how
many a prompt takes is the policy family's (`PolicyFrontend`); how they are preprocessed too
(`ImagePreprocessor`)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from vla_frames.image_errors import ImageInputError
from vla_frames.image_hash import format_mm_hash
from vla_server.config import FrontendConfig
from vla_server.errors import RequestError
from vla_server.frontend.generate_request import GenerateItem
from vla_server.io_struct import MMItem, ModelInfo, Tensor
from vla_server.multimodal.image_input import MediaPolicy
from vla_server.multimodal.image_pipeline import ImagePipeline
from vla_server.multimodal.pixel_cache import PixelCache
from vla_server.multimodal.preprocessor import ImagePreprocessor
from vla_server.multimodal.prompt_expansion import PlaceholderError, expand_image_placeholders
from vla_server.policies.base import PolicyFrontend


class MultimodalFrontend:
    def __init__(
        self,
        config: FrontendConfig,
        info: ModelInfo,
        policy: PolicyFrontend,
        preprocess: ImagePreprocessor | None,
    ):
        self.policy = policy
        self.max_images = config.max_images_per_request
        self.tokens_per_image = info.num_image_tokens
        self.vocab_size = info.vocab_size
        self.pipeline: ImagePipeline | None = None
        if self.tokens_per_image and preprocess is not None:
            media = MediaPolicy(
                max_image_bytes=config.max_image_bytes,
                max_image_pixels=config.max_image_pixels,
                allowed_local_media_path=config.allowed_local_media_path,
                allow_remote=config.allow_remote_media,
            )
            cache_bytes = int(config.mm_pixel_cache_mb * 1024 * 1024)
            cache = PixelCache(cache_bytes) if cache_bytes > 0 else None
            self.pipeline = ImagePipeline(media, preprocess, cache)
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="vla-mm")

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "num_image_tokens": self.tokens_per_image,
            "image_token": self.policy.image_token,  # the placeholder a prompt writes per image
        }
        if self.pipeline is not None:
            out["preprocess_digest"] = self.pipeline.preprocess_digest.hex()
            if self.pipeline.cache is not None:
                out["pixel_cache"] = self.pipeline.cache.stats()
        actions = self.policy.describe()
        if actions:
            out["actions"] = actions
        robot = self.policy.robot_io
        if robot is not None:
            out["robot"] = {
                "cameras": list(robot.cameras),
                "state_dim": robot.state_dim,
                "chunk_size": robot.chunk_size,
            }
        return out

    async def expand(
        self, item: GenerateItem, ids: list[int], field: str
    ) -> tuple[list[int], list[MMItem]]:
        """`ids` with image placeholders expanded, and the images that go with them."""
        if not item.images:
            if item.mm_hashes:
                raise RequestError("has entries for 0 images (one hash per image)", "mm_hashes")
            # A placeholder without an image is an ordinary token, as SGLang and transformers'
            # LLaVA read it: random-token benchmarks (bench_serving's random-ids) produce some.
            return ids, []
        hashes = item.mm_hashes
        if hashes is not None and not (
            isinstance(hashes, str)
            or (isinstance(hashes, list) and all(isinstance(h, str) for h in hashes))
        ):
            raise RequestError(
                "must be a hex string or a list of hex strings, one per image", "mm_hashes"
            )
        if self.pipeline is None:
            raise RequestError("this model takes no images", "image_data")
        family_max = self.policy.max_images
        if family_max is not None and len(item.images) > family_max:
            raise RequestError(
                f"{len(item.images)} images; this checkpoint takes "
                f"{'one image' if family_max == 1 else f'{family_max} images'} per prompt",
                "image_data",
            )
        if len(item.images) > self.max_images:
            raise RequestError(
                f"{len(item.images)} images; the server accepts at most {self.max_images} per "
                "request (--max-images-per-request)",
                "image_data",
            )
        loop = asyncio.get_running_loop()
        try:
            images = await loop.run_in_executor(
                self.executor, self.pipeline.process, item.images, item.mm_hashes
            )
        except ImageInputError as e:
            where = e.field if e.index is None else f"{e.field}[{e.index}]"
            raise RequestError(str(e), where) from None
        try:
            expanded, spans = expand_image_placeholders(
                ids,
                self.policy.image_token_id,
                [im.hash128 for im in images],
                self.tokens_per_image,
                self.vocab_size,
                self.policy.image_insert_at(ids),
            )
        except PlaceholderError as e:
            raise RequestError(str(e), field) from None
        items = [
            MMItem(
                format_mm_hash(sp.hash128), sp.offset, sp.length, Tensor.from_numpy(im.pixel_values)
            )
            for sp, im in zip(spans, images, strict=True)
        ]
        return expanded, items
