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

from vla_server.multimodal.action_tokenizer import ActionDecodeError, ActionTokenizer


@dataclass
class _State:
    pending: list[int] = field(default_factory=list)
    count: int = 0
    error: str | None = None


@dataclass
class ActionStep:
    actions: list[list[float]]
    count: int  # actions completed so far
    error: str | None = None


class ActionDetokenizer:
    def __init__(self, tokenizer: ActionTokenizer | None):
        self.tokenizer = tokenizer
        self.states: dict[str, _State] = {}

    def step(
        self, rid: str, new_ids: list[int], unnorm_key: str | None, finished: bool
    ) -> ActionStep:
        st = self.states.setdefault(rid, _State())
        out = ActionStep([], st.count)
        if st.error is not None:
            out.error = st.error
        elif self.tokenizer is None:
            out.error = "this model has no action tokenizer"
        else:
            st.pending += new_ids
            dim = self.tokenizer.action_dim
            try:
                while len(st.pending) >= dim:
                    group, st.pending = st.pending[:dim], st.pending[dim:]
                    out.actions.append(self.tokenizer.decode(group, unnorm_key).tolist())
                    st.count += 1
            except ActionDecodeError as e:
                out.error = f"action {st.count}: {e}"
        out.count = st.count
        st.error = out.error
        if finished:
            self.states.pop(rid, None)
        return out
