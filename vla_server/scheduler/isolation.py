"""Priority isolation: a realtime request's steps are not slowed by less important work.

A request at or above `--realtime-priority` (in the node's priority order) is protected. While
one is running or waiting, every step is built in two passes: the protected requests first
(their decode tokens, their prefill chunks within the chunk budget, their admission), then the
others through a `Gate`. The gate asks the online step-time model (`step_cost.py`) how many
tokens the protected step can take on while its predicted time grows by at most
`--realtime-tolerance`; other requests join in queue order while that allowance lasts (a
prefill chunk is cut to fit), and the rest are held. On a GPU the allowance is the whole batch;
on a CPU, where every row costs, it is small.

Held requests are not retracted: they keep their KV and their place, and one that has not had a
step for `--max-hold-ms` (since its last step, or its arrival if it never had one) is forced
into the next step whatever it costs. So each makes progress at a bounded rate and none
starves; the price of that bound is the occasional slower protected step, which the forced
requests pay for first out of the allowance. Steps without protected work (a protected request
that waits for a slot, or awaits its last result) are built as usual, except around a control
loop's next frame (and, with the background lane, while a protected request is in flight).

The background lane (`--realtime-background-lane`, on a CPU with cores to spare). On a CPU a
protected robot's steps can take a whole core, and every row others add to them costs; held
requests would then crawl at the max-hold rate. With the lane, what the gate left out runs
meanwhile in a second model lane on another core: one background step at a time, built from the
less important requests no step in flight holds as a step without isolation would be (a token
for each decoding one, prefill chunks within the chunk budget: big steps do the most work for
the time they share the cores). A held request then waits for the background step running when
it was left out and its own; it never joins a protected step (it would miss the lane's next
step), and around a control loop's next frame (below) the main lane stays clear of others too.
Two lanes computing at once still slow each other (memory bandwidth, caches, the OS's
placement), which is why the lane is a trade: the protected robot's latency for the others'
throughput.

A control loop's next frame (`--realtime-reserve-ms` R). A protected request that arrives while
a long step of others runs waits for that step: no gate can shorten a step already running. When
the protected requests arrive at a steady period (`arrival_rhythm.py`), the next one is
expected, and steps without protected work are built through a gate whose allowance is the
tokens the model predicts to finish by R before that moment; from then until R after it (the
frame is late; with the background lane, until it is a whole period late) the allowance is
nothing. Held requests are forced in after `--max-hold-ms` as above, and with no steady rhythm
(or R = 0) nothing is reserved, except that with the background lane the main lane stays clear
for a second after each of a loop's first frames (until its rhythm is known).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vla_server.config import SchedulerConfig
from vla_server.scheduler.arrival_rhythm import ArrivalRhythm
from vla_server.scheduler.policy import PolicyConfig
from vla_server.scheduler.req import Req
from vla_server.scheduler.state import SchedState
from vla_server.scheduler.step_cost import StepCostModel

# Auto mode's threshold. Below it a step is mostly interpreter time, which two lanes share under
# one GIL: on the demo VLA (a 3 ms step) the lane raised the protected robot's ITL P50 to 1.5x
# alone where the max-hold rule kept it at 1.05x; on a 45M Llama (a 14 ms step) it brought the ITL
# P99 from 18x to about 1.4x (`bench scheduler priority --workload image|text`).
LANE_MIN_STEP_S = 0.008


# With the lane and no rhythm yet, how long after a protected arrival the main lane stays clear:
# a control loop sends its frames more often than once a second.
FIRST_FRAMES_KEEP_S = 1.0


@dataclass(frozen=True)
class IsolationConfig:
    realtime_priority: int  # protected: at or above it, in the node's priority order
    max_hold_s: float
    tolerance: float  # allowed growth of the protected step's predicted time, a share
    reserve_s: float = 0.0  # half-width of the window kept clear around an expected arrival
    # "off", or the node has a background lane: "on" (always used) or "auto" (used while the
    # step-time model says a one-token step takes at least LANE_MIN_STEP_S)
    lane: str = "off"


class Gate:
    """Admission of less important work into one protected step."""

    def __init__(self, state: SchedState, allowance: int, now: float, max_hold_s: float):
        self.state = state
        self.allowance = allowance  # tokens others may still add
        self.now = now
        self.max_hold_s = max_hold_s

    def overdue(self, req: Req) -> bool:
        return self.now - req.last_step_at >= self.max_hold_s

    def may_run(self, req: Req) -> bool:
        """Whether `req` may get any token this step; counts it as held when not."""
        if self.overdue(req) or self.allowance >= 1:
            return True
        req.held = True
        self.state.held_steps += 1
        self.state.num_held += 1
        return False

    def allow(self, req: Req, need: int) -> int:
        """Tokens of its `need` that `req` gets this step (0: held)."""
        if not self.may_run(req):
            return 0
        n = need if self.overdue(req) else min(need, self.allowance)
        self.allowance -= n
        return n


class Isolation:
    def __init__(self, cfg: IsolationConfig, policy: PolicyConfig, model: StepCostModel):
        self.cfg = cfg
        self.policy = policy
        self.model = model
        self.rhythm = ArrivalRhythm()  # of the protected requests' arrivals

    @classmethod
    def from_config(
        cls, cfg: SchedulerConfig, policy: PolicyConfig, model: StepCostModel, lane: bool
    ) -> Isolation | None:
        """The node's isolation, or None without --realtime-priority; `lane`: the node has a
        background lane."""
        if cfg.realtime_priority is None:
            return None
        iso = IsolationConfig(
            cfg.realtime_priority,
            cfg.max_hold_ms / 1e3,
            cfg.realtime_tolerance,
            cfg.realtime_reserve_ms / 1e3,
            cfg.realtime_background_lane if lane else "off",
        )
        return cls(iso, policy, model)

    @property
    def lane(self) -> bool:
        """Whether held requests run in the background lane now (else the max-hold rule)."""
        if self.cfg.lane != "auto":
            return self.cfg.lane == "on"
        step = self.model.predict(1)
        return step is not None and step >= LANE_MIN_STEP_S

    @property
    def _gate_hold_s(self) -> float:
        # With the lane, held requests progress there: none is forced into a protected step.
        return math.inf if self.lane else self.cfg.max_hold_s

    def protects(self, req: Req) -> bool:
        p = self.cfg.realtime_priority
        return req.priority <= p if self.policy.low_values_first else req.priority >= p

    def active(self, state: SchedState) -> bool:
        """A protected request is running or waiting; records the arrivals of waiting ones."""
        last = self.rhythm.last()
        for req in state.waiting:
            if self.protects(req) and (last is None or req.arrival_time > last):
                self.rhythm.observe(req.arrival_time)
        return any(self.protects(r) and not r.finished for r in (*state.running, *state.waiting))

    def reserve_gate(self, state: SchedState, now: float) -> Gate | None:
        """The gate of a step without protected work that keeps the window around the next
        expected protected arrival clear; None when none is expected (or reserving is off)."""
        reserve = self.cfg.reserve_s
        if reserve <= 0:
            return None
        expected = self.rhythm.next_expected()
        if expected is None:
            return self._first_frames_gate(state, now)
        if now > expected + self._late_limit(reserve):
            return None
        # With the lane, the main lane keeps clear for the whole window: the next frame comes
        # when the loop's last one is answered, often well before its median period says.
        allowance = 0 if self.lane else self.model.tokens_within(expected - reserve - now)
        return Gate(state, allowance, now, self._gate_hold_s)

    def _first_frames_gate(self, state: SchedState, now: float) -> Gate | None:
        """With the lane, before the rhythm is known (a loop's first frames), the main lane
        stays clear for FIRST_FRAMES_KEEP_S after each protected arrival. Others that ran there
        between frames held up the lane (its next step waits for them) and the next frame (it
        waits for their step): a less important stream went 1.23x the hold plus the longest
        step between two tokens (`bench scheduler priority --workload text`, its first frames)."""
        last = self.rhythm.last()
        if not self.lane or last is None or now > last + FIRST_FRAMES_KEEP_S:
            return None
        return Gate(state, 0, now, math.inf)

    def _late_limit(self, reserve: float) -> float:
        """How late the expected frame may be while its window stays clear: R, or with the
        lane a whole period (holding others out of the main lane then costs them little, and a
        control loop's frames come late by more than R whenever its own steps vary)."""
        period = self.rhythm.period() if self.lane else None
        return reserve if period is None else max(reserve, period)

    def gate(self, state: SchedState, protected_tokens: int, now: float) -> Gate | None:
        """The gate of a step carrying `protected_tokens`. With the lane nothing else joins it
        (the others run there). Without, one that carries none while a protected request is in
        flight (it awaits its last result, or room) keeps the window before the next frame."""
        if self.lane:  # the others run in the lane; one in a protected step would miss it
            return Gate(state, 0, now, math.inf)
        if protected_tokens <= 0:
            return self.reserve_gate(state, now)
        allowance = self.model.allowance(protected_tokens, self.cfg.tolerance)
        return Gate(state, allowance, now, self._gate_hold_s)
