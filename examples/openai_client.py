"""Chat with an image through the OpenAI-compatible API, using the `openai` package.

vla-server serve &
python examples/openai_client.py [--image frame.png]
"""

from __future__ import annotations

import argparse
import base64
import io
from pathlib import Path

import numpy as np
import openai
from PIL import Image


def data_url(path: Path | None) -> str:
    if path is not None:
        kind = "jpeg" if path.suffix.lower() in (".jpg", ".jpeg") else "png"
        return f"data:image/{kind};base64," + base64.b64encode(path.read_bytes()).decode()
    pixels = np.random.default_rng(0).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:30000/v1")
    parser.add_argument("--image", type=Path)
    args = parser.parse_args()
    client = openai.OpenAI(base_url=args.url, api_key="unused")  # or the server's --api-key
    model = client.models.list().data[0].id
    stream = client.chat.completions.create(
        model=model,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What should the robot do next?"},
                    {"type": "image_url", "image_url": {"url": data_url(args.image)}},
                ],
            }
        ],
        max_tokens=16,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
        if chunk.usage:
            usage = chunk.usage
            print(f"\n{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens")


if __name__ == "__main__":
    main()
