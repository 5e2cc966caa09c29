"""pi0's and pi0.5's prompts (shared/reference/pi0.md §2), the bidirectional prefix after the
cameras' image tokens; the tokenizer adds `<bos>` itself.

* pi0: `<bos>` + task + `"\\n"`; the state goes to the action expert's state token. openpi
  cleans the task (`clean_task`); LeRobot 0.6.1's pi0 processor does not (no strip, "_" kept),
  so a LeRobot folder's prompt keeps the instruction as given.
* pi0.5: `<bos>"Task: {task}, State: {bins};\\nAction: "`, the task cleaned in both
  conventions, the bins openpi's discretisation of the normalised state
  (`FlowActionPolicy.state_bins`).
"""

from __future__ import annotations

from vla_server.policies.pi_common.flow_actions import FlowActionPolicy
from vla_server.policies.pi_common.policy_inputs import clean_task


def flow_prompt_text(
    policy: FlowActionPolicy, instruction: str, state: list[float], convention: str
) -> str:
    if not policy.state_in_prompt:
        task = instruction if convention == "lerobot" else clean_task(instruction)
        return task + "\n"
    bins = " ".join(map(str, policy.state_bins(state)))
    return f"Task: {clean_task(instruction)}, State: {bins};\nAction: "
