"""`GetActions` replies: `pickle(list[TimedAction])` that LeRobot's client loads as its own
classes.

The client runs `pickle.loads` and reads `timed_action.get_action()` (a torch tensor), so each
item must be an instance of LeRobot's `TimedAction`. Pickle names a class by module and name,
and the standard pickler checks that name by importing it; the node never imports lerobot, so
this pickler writes that one name itself (`save_global`) and pickles everything else as
usual. The module path is the one the client's own pickles used (`lerobot.async_inference.
helpers`, or `lerobot.scripts.server.helpers` before LeRobot 0.4), so older clients load it too.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np
import torch

from vla_server.frontend.lerobot_grpc.lerobot_types import TimedAction
from vla_server.frontend.lerobot_grpc.unpickler import HELPERS_MODULES

# Protocol 4: what LeRobot's Python 3.12 client writes itself (pickle.DEFAULT_PROTOCOL).
PROTOCOL = 4


class _ReplyPickler(pickle._Pickler):  # type: ignore[name-defined]
    def __init__(self, file: io.BytesIO, helpers_module: str):
        super().__init__(file, protocol=PROTOCOL)
        self.helpers_module = helpers_module

    def save_global(self, obj: Any, name: str | None = None) -> None:
        if obj is not TimedAction:
            super().save_global(obj, name)
            return
        self.save(self.helpers_module)
        self.save("TimedAction")
        self.write(pickle.STACK_GLOBAL)
        self.memoize(obj)

    dispatch = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]
    dispatch[type] = save_global


def timed_actions(
    actions: np.ndarray, timestamp: float, timestep: int, fps: float
) -> list[TimedAction]:
    """LeRobot's timing of a chunk: action i at `timestamp + i * (1 / fps)` (its
    `environment_dt`, the same float arithmetic), timestep `timestep + i`; each a float32
    tensor (LeRobot's post-processed, unnormalised action)."""
    return [
        TimedAction(
            timestamp=timestamp + i * (1 / fps),
            timestep=timestep + i,
            action=torch.from_numpy(np.ascontiguousarray(row, dtype=np.float32)),
        )
        for i, row in enumerate(actions)
    ]


def pickle_actions(actions: list[TimedAction], helpers_module: str | None) -> bytes:
    module = helpers_module if helpers_module in HELPERS_MODULES else HELPERS_MODULES[0]
    out = io.BytesIO()
    _ReplyPickler(out, module).dump(actions)
    return out.getvalue()
