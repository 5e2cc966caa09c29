"""How long a step of n tokens takes on this node, learned online from the measured steps.

A step's time is modelled as a function of its token count alone (one per decoding request plus
each prefill chunk's length): on a GPU it is almost flat at small counts (the weights are read
once for the whole batch), on a CPU it grows roughly linearly from a few rows on. Both shapes
come out of the same table: the token counts are grouped in powers of two, each group keeps an
exponential moving average of its steps' token count and seconds, and a prediction interpolates
linearly between the groups seen, made non-decreasing (noise must not make a bigger step look
cheaper). Below the range seen it is proportional to the token count, as on a CPU, so a
protected step never looks cheaper than it is before it has been measured; above the range it
follows the slope of the largest groups seen (flat on a GPU, steep on a CPU). Every step run,
including the forced steps of held requests (`isolation.py`), measures its own size, so the
table fills where it is used and a wrong guess costs at most a step or two.

What it does not see: attention over long contexts and vision-tower time inside a prefill are
folded into the token count of the steps that had them.
"""

from __future__ import annotations

EMA = 0.1  # weight of the newest measurement in its group
MAX_TOKENS = 1 << 20  # upper end of the search for an allowance


class StepCostModel:
    def __init__(self) -> None:
        self._groups: dict[int, tuple[float, float]] = {}  # log2 group -> (mean tokens, mean s)

    def observe(self, num_tokens: int, seconds: float) -> None:
        if num_tokens <= 0 or seconds <= 0:
            return
        g = num_tokens.bit_length()
        prev = self._groups.get(g)
        if prev is None:
            self._groups[g] = (float(num_tokens), seconds)
            return
        n, s = prev
        self._groups[g] = (n + EMA * (num_tokens - n), s + EMA * (seconds - s))

    def _points(self) -> list[tuple[float, float]]:
        """(tokens, seconds) of each group by tokens, the seconds made non-decreasing."""
        points, top = [], 0.0
        for _, (n, s) in sorted(self._groups.items()):
            top = max(top, s)
            points.append((n, top))
        return points

    def predict(self, num_tokens: int) -> float | None:
        """Predicted seconds of a step of `num_tokens` tokens; None before any measurement.

        Below the smallest group seen: proportional to the tokens (a pessimistic base makes a
        small allowance). Above the largest: along the slope of the last two groups, or
        proportional with only one group.
        """
        points = self._points()
        if not points:
            return None
        x = float(num_tokens)
        lo_n, lo_s = points[0]
        if x <= lo_n:
            return lo_s * x / lo_n
        slope = lo_s / lo_n
        for hi_n, hi_s in points[1:]:
            slope = (hi_s - lo_s) / (hi_n - lo_n)
            if x <= hi_n:
                return lo_s + slope * (x - lo_n)
            lo_n, lo_s = hi_n, hi_s
        return lo_s + slope * (x - lo_n)

    def allowance(self, base_tokens: int, tolerance: float) -> int:
        """Most tokens a step of `base_tokens` can take on while its predicted time grows by at
        most `tolerance` (a share); 0 before any measurement, and always 0 for a tolerance of 0
        or less (strict: others join only when forced)."""
        base = self.predict(base_tokens)
        if base is None or base_tokens <= 0 or tolerance <= 0:
            return 0
        return self.tokens_within(base * (1.0 + tolerance), base_tokens)

    def tokens_within(self, seconds: float, base_tokens: int = 0) -> int:
        """Most tokens a step of `base_tokens` can take on while its predicted time stays within
        `seconds` (0 before any measurement). Built on every step while a frame is expected, so
        the prediction is inverted segment by segment rather than searched."""
        most = self._most_tokens(seconds)
        if most is None:
            return 0
        extra = MAX_TOKENS if most >= MAX_TOKENS + base_tokens else max(0, int(most) - base_tokens)
        # The inversion's float rounding may be a token off either way: settle on `predict`.
        while extra < MAX_TOKENS and self._fits(base_tokens + extra + 1, seconds):
            extra += 1
        while extra > 0 and not self._fits(base_tokens + extra, seconds):
            extra -= 1
        return extra

    def _fits(self, num_tokens: int, seconds: float) -> bool:
        t = self.predict(num_tokens)
        return t is not None and t <= seconds

    def _most_tokens(self, seconds: float) -> float | None:
        """The token count whose predicted time is `seconds` (`predict` inverted; infinite where
        it stays flat above the largest group)."""
        points = self._points()
        if not points:
            return None
        lo_n, lo_s = points[0]
        if seconds < lo_s:
            return seconds * lo_n / lo_s
        slope = lo_s / lo_n
        for hi_n, hi_s in points[1:]:
            if seconds < hi_s:
                return lo_n + (seconds - lo_s) * (hi_n - lo_n) / (hi_s - lo_s)
            slope = (hi_s - lo_s) / (hi_n - lo_n)
            lo_n, lo_s = hi_n, hi_s
        return float("inf") if slope <= 0 else lo_n + (seconds - lo_s) / slope

    def table(self) -> dict[str, float]:
        """Tokens -> milliseconds of each group, for the scheduler's internal state."""
        return {f"{n:.0f}": s * 1e3 for n, s in self._points()}
