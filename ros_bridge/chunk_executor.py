"""Action chunks in, one command per control period out (ROS-free).

The model answers a camera frame stamped `s` with a chunk of actions; action i is the joint
target for `s + (i + 1)·Δ`, Δ being the action period (1 / `action_rate_hz`). The arm needs one
command every control period; `command(t)` is the one for time `t`. A chunk covers
`(s, s + n·Δ]` for the n actions received so far (they stream in one by one):

- hold: the chunk's next target, the first action due at or after t (a zero-order hold);
- interpolate: linear between the chunk's actions (its first action before that);
- ensemble: ACT's temporal ensembling: every chunk covering t contributes its interpolated
  value, weighted `exp(-coeff · (s_c - s_oldest) / Δ)`, so with coeff > 0 the older chunks
  count more, as in ACT (coeff 0.01, ACT's default, is close to a plain average);
- rtc: real-time chunking. Each request carries the plan's actions still due after the new
  frame's stamp (`rtc_guidance`: the unexecuted tail, raw) and the inference delay measured on
  the last chunk (the actions the robot executed while it was computed); the server denoises
  the new chunk to continue that tail, so the executor switches to it at t's offset, as
  interpolate does, without blending.

The newest chunk covering t replaces the older ones at t's offset from its own frame stamp,
however late it arrived (hold, interpolate, rtc). An action is commanded only for its own time:
one that arrives after it is never applied. In interpolate and ensemble every change of the
chunks in use (a chunk arriving, one running out, the plan resuming) is blended linearly from the
last command over one action period: the command then never steps by more than
`2 · span · control period / Δ`, span being the largest spread of an action dimension. Hold does
not blend: it jumps whenever the model's targets do.

`expire()` is where the bridge would apply `on_late` (a frame missed its deadline, the server
failed): every chunk held is dropped, its remaining actions are never commanded and actions that
still arrive for it are refused. While no chunk covers t, the command is the `on_late` one: hold
repeats the last command (before the first one: the robot's current position, when the caller
knows it), zero sends zeros, stop sends a stop (values None).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from ros_bridge.late_policy import OnLate

CHUNK_LOG_SIZE = 10_000  # recent chunk arrivals kept for reports


class ExecutorMode(StrEnum):
    NONE = "none"  # no executor: each action is published the moment it streams in
    HOLD = "hold"
    INTERPOLATE = "interpolate"
    ENSEMBLE = "ensemble"
    RTC = "rtc"


@dataclass(frozen=True)
class ExecutorConfig:
    mode: ExecutorMode
    action_period_ns: int  # Δ: spacing of a chunk's actions
    control_period_ns: int  # spacing of the commands asked for
    on_late: OnLate = OnLate.HOLD
    ensemble_coeff: float = 0.01
    width: int | None = None  # the action width, when the joints are known (zero needs it)

    def __post_init__(self) -> None:
        if self.mode is ExecutorMode.NONE:
            raise ValueError("an executor needs mode hold, interpolate or ensemble")
        if self.action_period_ns <= 0 or self.control_period_ns <= 0:
            raise ValueError("action and control periods must be > 0")


@dataclass(frozen=True)
class ChunkCommand:
    target_ns: int  # the time the command is for
    values: tuple[float, ...] | None  # None: stop commanding
    source_ns: int | None  # stamp of the newest chunk used; None: an on_late command

    @property
    def late(self) -> bool:
        return self.source_ns is None


@dataclass(frozen=True)
class ChunkArrival:
    stamp_ns: int  # the frame's capture stamp
    received_ns: int  # when its first action reached the executor (caller's clock)


@dataclass
class ExecutorCounters:
    chunks: int = 0  # chunks started (a first action arrived)
    actions_received: int = 0
    actions_refused: int = 0  # for a dropped chunk, out of order, or an older frame
    actions_late: int = 0  # arrived after their own time: never commanded
    rtc_guided: int = 0  # requests that carried the plan's tail (rtc_guidance answered)
    expiries: int = 0  # expire() calls that dropped a plan
    chunk_commands: int = 0
    late_commands: int = 0
    blends: int = 0  # transitions smoothed
    # How much consecutive chunks disagree: |new - previous| summed over the values both have
    # for the same time (their overlap), and how many values that was.
    overlap_abs_sum: float = 0.0
    overlap_values: int = 0
    # At each switch (a newer chunk takes over), how far its plan for that instant is from the
    # previous chunk's: the jump the executor has to smooth, or the robot takes.
    switch_gap_sum: float = 0.0  # of the mean |new - previous| over the joints
    switch_gaps: int = 0

    @property
    def overlap_mean_abs(self) -> float | None:
        return self.overlap_abs_sum / self.overlap_values if self.overlap_values else None

    @property
    def switch_gap_mean(self) -> float | None:
        return self.switch_gap_sum / self.switch_gaps if self.switch_gaps else None


@dataclass
class _Chunk:
    stamp_ns: int
    points: list[np.ndarray] = field(default_factory=list)

    def end_ns(self, period_ns: int) -> int:
        return self.stamp_ns + len(self.points) * period_ns

    def covers(self, t_ns: int, period_ns: int) -> bool:
        return self.stamp_ns < t_ns <= self.end_ns(period_ns)

    def held(self, t_ns: int, period_ns: int) -> np.ndarray:
        """The first action due at or after t."""
        return self.points[-(-(t_ns - self.stamp_ns) // period_ns) - 1]

    def interpolated(self, t_ns: int, period_ns: int) -> np.ndarray:
        offset = (t_ns - self.stamp_ns) / period_ns - 1.0  # in actions from the first one
        if offset <= 0.0 or len(self.points) == 1:
            return self.points[0]
        i = min(int(offset), len(self.points) - 2)
        frac = offset - i
        return self.points[i] + frac * (self.points[i + 1] - self.points[i])


@dataclass(frozen=True)
class RtcGuidance:
    """Real-time chunking's fields for the next request (raw units, as the robot has them)."""

    prev_chunk: np.ndarray  # [n, action_dim]: the plan's actions due after the frame
    inference_delay: int  # actions the robot executes before the new chunk can start


@dataclass
class _Blend:
    start: np.ndarray
    start_ns: int


class ChunkExecutor:
    """Thread-safe: actions arrive on the bridge's network thread, commands are asked for on an
    executor thread."""

    def __init__(self, config: ExecutorConfig) -> None:
        self.config = config
        self.counters = ExecutorCounters()
        self.arrivals: deque[ChunkArrival] = deque(maxlen=CHUNK_LOG_SIZE)
        self._lock = threading.Lock()
        self._chunks: list[_Chunk] = []  # oldest first
        self._floor_ns = -1  # chunks stamped at or before this were dropped
        self._last: np.ndarray | None = None
        self._last_ns: int | None = None
        self._used: tuple[int, ...] = ()
        self._blend: _Blend | None = None

    def add_action(
        self, stamp_ns: int, index: int, action: Sequence[float], received_ns: int
    ) -> bool:
        """Action `index` of the frame stamped `stamp_ns`; False when refused. Raises
        ValueError for a width that differs from the configured or earlier actions."""
        values = np.asarray(action, dtype=np.float64)
        with self._lock:
            self._check_width(values)
            chunk = self._chunk_for(stamp_ns, index, received_ns)
            if chunk is None or index != len(chunk.points):
                self.counters.actions_refused += 1
                return False
            chunk.points.append(values)
            self.counters.actions_received += 1
            if received_ns > chunk.end_ns(self.config.action_period_ns):
                self.counters.actions_late += 1
            self._compare_with_previous(chunk)
            return True

    def rtc_guidance(self, stamp_ns: int, horizon: int) -> RtcGuidance | None:
        """For a request on the frame stamped `stamp_ns`: the newest chunk's actions due after
        it, and the delay of the last chunk (in action periods, rounded up, at most `horizon`
        and the tail's length). None before a first chunk."""
        period = self.config.action_period_ns
        with self._lock:
            if not self._chunks or not self.arrivals:
                return None
            chunk, arrival = self._chunks[-1], self.arrivals[-1]
            start = max(round((stamp_ns - chunk.stamp_ns) / period), 0)
            tail = chunk.points[start:]
            if not tail:
                return None
            delay = -(-(arrival.received_ns - arrival.stamp_ns) // period)
            delay = min(max(delay, 0), horizon, len(tail))
            self.counters.rtc_guided += 1
            return RtcGuidance(np.stack(tail), int(delay))

    def reconfigure(self, config: ExecutorConfig) -> None:
        """New settings (a parameter changed at runtime); the plan is kept."""
        with self._lock:
            self.config = config

    def expire(self) -> None:
        """Drops the plan: on_late applies until a newer frame's chunk arrives."""
        with self._lock:
            if self._chunks:
                self._floor_ns = max(self._floor_ns, self._chunks[-1].stamp_ns)
                self._chunks.clear()
                self.counters.expiries += 1

    def command(
        self, target_ns: int, current: Sequence[float] | None = None
    ) -> ChunkCommand | None:
        """The command for `target_ns`; None when there is nothing to send (hold before any
        command, zero without a known width). `current`: the robot's position, if known."""
        position = None if current is None else np.asarray(current, dtype=np.float64)
        with self._lock:
            self._prune(target_ns)
            used = [c for c in self._chunks if c.covers(target_ns, self.config.action_period_ns)]
            if self.config.mode is not ExecutorMode.ENSEMBLE:
                used = used[-1:]  # the newest chunk that covers t replaces the older ones
            if not used:
                command = self._late(target_ns, position)
            else:
                self._measure_switch(used[-1], target_ns)
                values = self._smooth(self._plan(used, target_ns), used, target_ns, position)
                command = ChunkCommand(target_ns, _tuple(values), used[-1].stamp_ns)
                self.counters.chunk_commands += 1
            self._used = tuple(c.stamp_ns for c in used)
            return command

    # --- under the lock ------------------------------------------------------------------
    def _check_width(self, values: np.ndarray) -> None:
        width = self.config.width
        if width is None and self._chunks:
            width = self._chunks[-1].points[0].shape[0]
        if values.ndim != 1 or (width is not None and values.shape[0] != width):
            raise ValueError(f"action of {values.shape[-1]} values, expected {width}")

    def _chunk_for(self, stamp_ns: int, index: int, received_ns: int) -> _Chunk | None:
        if self._chunks and self._chunks[-1].stamp_ns == stamp_ns:
            return self._chunks[-1]
        newest = self._chunks[-1].stamp_ns if self._chunks else self._floor_ns
        if stamp_ns <= max(newest, self._floor_ns) or index != 0:
            return None
        self._chunks.append(_Chunk(stamp_ns))
        self.counters.chunks += 1
        self.arrivals.append(ChunkArrival(stamp_ns, received_ns))
        return self._chunks[-1]

    def _measure_switch(self, newest: _Chunk, t_ns: int) -> None:
        if not self._used or newest.stamp_ns == self._used[-1]:
            return
        period = self.config.action_period_ns
        previous = next((c for c in self._chunks if c.stamp_ns == self._used[-1]), None)
        if previous is None or not previous.covers(t_ns, period):
            return
        gap = np.abs(newest.interpolated(t_ns, period) - previous.interpolated(t_ns, period))
        self.counters.switch_gap_sum += float(gap.mean())
        self.counters.switch_gaps += 1

    def _compare_with_previous(self, chunk: _Chunk) -> None:
        """Adds the newest action's disagreement with the previous chunk at the same time."""
        if len(self._chunks) < 2 or chunk is not self._chunks[-1]:
            return
        previous, period = self._chunks[-2], self.config.action_period_ns
        index = len(chunk.points) - 1 + round((chunk.stamp_ns - previous.stamp_ns) / period)
        if index < len(previous.points):
            diff = np.abs(chunk.points[-1] - previous.points[index])
            self.counters.overlap_abs_sum += float(diff.sum())
            self.counters.overlap_values += diff.size

    def _prune(self, t_ns: int) -> None:
        """Chunks that ended before t go once a newer one exists (only the newest can grow)."""
        period = self.config.action_period_ns
        newest = self._chunks[-1:] if self._chunks else []
        self._chunks = [c for c in self._chunks[:-1] if c.end_ns(period) >= t_ns] + newest

    def _plan(self, used: list[_Chunk], t_ns: int) -> np.ndarray:
        period = self.config.action_period_ns
        mode = self.config.mode
        if mode is ExecutorMode.HOLD:
            return used[-1].held(t_ns, period)
        if mode in (ExecutorMode.INTERPOLATE, ExecutorMode.RTC):
            return used[-1].interpolated(t_ns, period)
        ages = np.array([(c.stamp_ns - used[0].stamp_ns) / period for c in used])
        weights = np.exp(-self.config.ensemble_coeff * ages)
        values = np.stack([c.interpolated(t_ns, period) for c in used])
        return weights @ values / weights.sum()

    def _smooth(
        self, plan: np.ndarray, used: list[_Chunk], t_ns: int, position: np.ndarray | None
    ) -> np.ndarray:
        if self.config.mode in (ExecutorMode.HOLD, ExecutorMode.RTC):
            return self._remember(plan, t_ns)  # rtc: the new chunk already continues the plan
        if tuple(c.stamp_ns for c in used) != self._used:
            start = self._last if self._last is not None else position
            if start is not None and start.shape == plan.shape:
                start_ns = self._last_ns
                if start_ns is None:
                    start_ns = t_ns - self.config.control_period_ns
                self._blend = _Blend(start, start_ns)
                self.counters.blends += 1
        if self._blend is not None:
            done = (t_ns - self._blend.start_ns) / self.config.action_period_ns
            if done >= 1.0:
                self._blend = None
            else:
                plan = self._blend.start + max(done, 0.0) * (plan - self._blend.start)
        return self._remember(plan, t_ns)

    def _remember(self, values: np.ndarray, t_ns: int) -> np.ndarray:
        self._last, self._last_ns = values, t_ns
        return values

    def _late(self, t_ns: int, position: np.ndarray | None) -> ChunkCommand | None:
        self._blend = None
        policy = self.config.on_late
        if policy is OnLate.STOP:
            values: np.ndarray | None = None
        elif policy is OnLate.HOLD:
            values = self._last if self._last is not None else position
            if values is None:
                return None
            self._remember(values, t_ns)
        else:
            width = self.config.width or _width(self._last, position)
            if width is None:
                return None
            values = self._remember(np.zeros(width), t_ns)
        self.counters.late_commands += 1
        return ChunkCommand(t_ns, None if values is None else _tuple(values), None)


def _width(*arrays: np.ndarray | None) -> int | None:
    return next((a.shape[0] for a in arrays if a is not None), None)


def _tuple(values: np.ndarray) -> tuple[float, ...]:
    return tuple(float(x) for x in values)
