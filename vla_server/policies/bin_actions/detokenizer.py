"""Turning streamed action-bin tokens into action vectors, one completed group at a time.

Every `action_dim` consecutive output tokens of an action request form one action; it is
decoded and un-normalised the moment its last token arrives. A failure (a non-bin token, NaN
statistics) is reported as an error, never turned into zeros: zero un-normalises to a
mid-range command. A failed request stays failed: the scheduler may send more of its tokens
before the front end's abort reaches it, and those are not decoded (they would also be grouped
from the wrong offset).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vla_server.policies.base import ActionOutput, ActionStep
from vla_server.policies.bin_actions.action_tokenizer import ActionDecodeError, ActionTokenizer


@dataclass
class _State:
    pending: list[int] = field(default_factory=list)
    count: int = 0
    error: str | None = None


class BinActionDecoder:
    def __init__(self, tokenizer: ActionTokenizer):
        self.tokenizer = tokenizer
        self.states: dict[str, _State] = {}

    def step(self, out: ActionOutput) -> ActionStep:
        st = self.states.setdefault(out.rid, _State())
        step = ActionStep([], st.count, st.error)
        if st.error is None:
            st.pending += out.new_ids
            dim = self.tokenizer.action_dim
            try:
                while len(st.pending) >= dim:
                    group, st.pending = st.pending[:dim], st.pending[dim:]
                    step.actions.append(self.tokenizer.decode(group, out.unnorm_key).tolist())
                    st.count += 1
            except ActionDecodeError as e:
                step.error = f"action {st.count}: {e}"
        step.count = st.count
        st.error = step.error
        if out.finished is not None:
            self.states.pop(out.rid, None)
        return step
