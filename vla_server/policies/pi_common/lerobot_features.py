"""The feature keys of a LeRobot policy config (`input_features`, `output_features`).

Their own module so that both the LeRobot config reader and the openpi folder reader, which
describes an openpi conversion in LeRobot's terms, can name them without importing each other.
"""

from __future__ import annotations

IMAGE_PREFIX = "observation.images."
STATE_KEY = "observation.state"
ACTION_KEY = "action"
