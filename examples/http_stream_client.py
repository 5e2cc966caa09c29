"""Stream actions from POST /generate over SSE, printing each action vector as it completes.

    vla-server serve &                                # the demo VLA on port 30000
    python examples/http_stream_client.py [--image frame.jpg] [--num-actions 4]

Without --image a synthetic 224x224 frame is sent as raw pixels. The prompt follows the demo
checkpoint's chat template by hand, instruction first and `<image>` last (so a new frame reuses
the instruction's KV); POST /v1/actions builds exactly this prompt for you.
"""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path

import httpx
import numpy as np


def image_entry(path: Path | None) -> object:
    if path is not None:  # an encoded PNG/JPEG travels as base64
        return base64.b64encode(path.read_bytes()).decode()
    pixels = np.random.default_rng(0).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    return {
        "shape": list(pixels.shape),
        "dtype": "uint8",
        "data": base64.b64encode(pixels.tobytes()).decode(),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    parser.add_argument("--image", type=Path)
    parser.add_argument("--instruction", default="pick up the red block")
    parser.add_argument("--unnorm-key", default="demo_arm")
    parser.add_argument("--num-actions", type=int, default=4)
    args = parser.parse_args()
    body = {
        "text": f"<|im_start|>user\n{args.instruction}<image><|im_end|>\n<|im_start|>assistant\n",
        "image_data": image_entry(args.image),
        "unnorm_key": args.unnorm_key,
        "num_actions": args.num_actions,
        "sampling_params": {"temperature": 0},
        "stream": True,
    }
    with httpx.stream("POST", f"{args.url}/generate", json=body, timeout=60) as r:
        if r.status_code != 200:
            raise SystemExit(f"{r.status_code}: {r.read().decode()}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            meta = chunk["meta_info"]
            for action in chunk.get("actions", []):
                print(" ".join(f"{x:+.4f}" for x in action))
            if meta["finish_reason"] is not None:
                ttfa = meta.get("time_to_first_action")
                print(
                    f"finish: {meta['finish_reason']}, actions: {meta.get('num_actions')}, "
                    f"time to first action: {ttfa * 1000 if ttfa else float('nan'):.1f} ms"
                )


if __name__ == "__main__":
    main()
