"""The node in your own Python process (no HTTP): `vla_server.Engine`.

    python examples/engine_api.py [--model-path path/to/llava-vla]   # default: the demo VLA

Starts the scheduler and detokenizer processes, asks for actions for a synthetic camera frame,
then streams a second request for another frame. Note the `if __name__ == "__main__"` guard:
the Engine starts child processes.
"""

from __future__ import annotations

import argparse

import numpy as np

from vla_server import Engine

PROMPT = "<|im_start|>user\npick up the red block<image><|im_end|>\n<|im_start|>assistant\n"


def frame(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (224, 224, 3), dtype=np.uint8)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path")
    args = parser.parse_args()
    with Engine(model_path=args.model_path) as engine:
        out = engine.generate(
            text=PROMPT,
            image_data=frame(0),  # numpy uint8 [H, W, 3] works in-process
            unnorm_key="demo_arm",
            num_actions=2,
            sampling_params={"temperature": 0},
        )
        print("actions:", np.round(out["actions"], 4).tolist())
        print("prompt tokens:", out["meta_info"]["prompt_tokens"])
        for chunk in engine.generate(
            text=PROMPT,
            image_data=frame(1),
            unnorm_key="demo_arm",
            num_actions=3,
            sampling_params={"temperature": 0},
            stream=True,
        ):
            for action in chunk.get("actions", []):
                print("streamed:", np.round(action, 4).tolist())
        cached = chunk["meta_info"]["cached_tokens"]
        print(f"the second frame reused {cached} prompt tokens (the instruction's KV)")


if __name__ == "__main__":
    main()
