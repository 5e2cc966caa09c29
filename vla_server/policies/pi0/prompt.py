"""pi0's and pi0.5's prompts (shared/reference/pi0.md §2), the bidirectional prefix after the
cameras' image tokens; the tokenizer adds `<bos>` itself.

* pi0: `<bos>` + task + `"\\n"`; the state goes to the action expert's state token.
* pi0.5: `<bos>"Task: {task}, State: {bins};\\nAction: "`, the bins openpi's discretisation of
  the normalised state (`FlowActionPolicy.state_bins`).
"""

from __future__ import annotations

from vla_server.policies.pi0.flow_actions import FlowActionPolicy
from vla_server.policies.pi_common.policy_inputs import clean_task


def flow_prompt_text(policy: FlowActionPolicy, instruction: str, state: list[float]) -> str:
    task = clean_task(instruction)
    if not policy.state_in_prompt:
        return task + "\n"
    bins = " ".join(map(str, policy.state_bins(state)))
    return f"Task: {task}, State: {bins};\nAction: "
