"""pi0-FAST's streamed FAST tokens -> one action chunk per request.

The tokens of an action request stream out as they come (as any output ids); the chunk is
decoded once, when `|` arrives (or EOS, or the request reaches its token budget): the FAST ids
before it are mapped to FAST tokens, BPE- and DCT-decoded and unnormalised
(`FastActionTokenizer.decode_chunk`), and the request's first `count` actions of the chunk go
out as one `actions` message. A sequence that does not decode (a wrong number of coefficients,
bytes that are not a character) ends the request with an `action_error` naming the problem, as
the node's rule is for any action that cannot be decoded: the reference decoder's zeros would
look like a valid command. A request that asked for LeRobot's relaxed decoding gets its
pad/truncate instead. A request that ends otherwise (abort, deadline) decodes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vla_server.io_struct import FinishLength, FinishStop
from vla_server.policies.base import ActionOutput, ActionStep
from vla_server.policies.pi0fast.fast_actions import FastActionTokenizer
from vla_server.policies.pi0fast.fast_codec import FastDecodeError


@dataclass
class _State:
    ids: list[int] = field(default_factory=list)
    done: bool = False  # the chunk went out (or failed)


class FastActionDetokenizer:
    def __init__(self, tokenizer: FastActionTokenizer):
        self.tokenizer = tokenizer
        self.ends = set(tokenizer.end_ids) | set(tokenizer.eos_ids)
        self.states: dict[str, _State] = {}

    def step(self, out: ActionOutput) -> ActionStep:
        st = self.states.setdefault(out.rid, _State())
        step = ActionStep([], 0)
        if not st.done:
            new_ids = out.new_ids
            cut = next((i for i, t in enumerate(new_ids) if t in self.ends), None)
            st.ids += new_ids if cut is None else new_ids[:cut]
            if cut is not None or isinstance(out.finished, FinishLength | FinishStop):
                st.done = True
                step = self._chunk(st.ids, out.num_actions, out.relaxed_decoding)
        if out.finished is not None:
            self.states.pop(out.rid, None)
        return step

    def _chunk(self, ids: list[int], count: int, relaxed: bool) -> ActionStep:
        try:
            chunk = self.tokenizer.decode_chunk(ids, relaxed)
        except FastDecodeError as e:
            return ActionStep([], 0, f"the chunk's {len(ids)} FAST tokens do not decode: {e}")
        actions = chunk[: count or len(chunk)].tolist()
        return ActionStep(actions, len(actions))
