"""A trajectory's caps and endings (pure): how many tokens the next generation may add, whether
its prompt and its weights are acceptable, and which terminal reason an ending gets
(``heddle.events.base.TerminalReason``)."""

from __future__ import annotations

from heddle.events import Generated, TerminalReason, TrajectorySpec
from heddle.workers.agent.trajectory_log import TrajectoryLog
from heddle.workers.tokenizers import Tokenizer


def max_new_tokens(
    spec: TrajectorySpec, context: list[int], num_prompt_tokens: int, target: int | None
) -> int:
    """The spec's per-step cap, the room left in the context and in the response, and the
    environment's target length (trace replay: engines that cannot force a length still stop
    there)."""
    cap = min(spec.max_new_tokens, spec.max_total_tokens - len(context))
    if spec.max_response_tokens is not None:
        num_response = max(0, len(context) - num_prompt_tokens)
        cap = min(cap, spec.max_response_tokens - num_response)
    if target is not None:
        cap = min(cap, target)
    return max(1, cap)


def prompt_error(spec: TrajectorySpec, tokenizer: Tokenizer) -> str | None:
    """What is wrong with the spec's prompt ids for ``tokenizer`` (None: nothing)."""
    vocab_size = tokenizer.vocab_size
    for position, token_id in enumerate(spec.prompt_token_ids):
        if not 0 <= token_id < vocab_size:
            return (
                f"prompt_token_ids[{position}] = {token_id} is outside the vocabulary "
                f"[0, {vocab_size}) of tokenizer {tokenizer.name!r}"
            )
    return None


def staleness_error(log: TrajectoryLog, spec: TrajectorySpec, weight_version: int) -> str | None:
    """Why generating on ``weight_version`` would make the trajectory span versions more than
    ``spec.max_staleness`` apart (None: it would not, or there is no bound)."""
    if spec.max_staleness is None:
        return None
    versions = [event.weight_version for event in log.generated_events()]
    oldest = min(versions, default=weight_version)
    if weight_version - oldest <= spec.max_staleness:
        return None
    return f"stale: weights {oldest}..{weight_version} exceed max_staleness {spec.max_staleness}"


def num_response_tokens(log: TrajectoryLog) -> int:
    return log.num_context_tokens - log.num_prompt_tokens


def judged_generation(log: TrajectoryLog) -> Generated | None:
    """The generation an environment's verdict is about when none is pending (a resumed
    trajectory): the last one, unless a tool call followed it (then an observation was)."""
    if not log.steps or log.steps[-1].tool_called is not None:
        return None
    return log.steps[-1].generated


def ending_reason(generated: Generated | None, *, is_capped: bool) -> TerminalReason:
    """Terminal reason when the environment ends the trajectory: the last generation's (a
    truncated one is ``length``), ``environment_done`` when it ended on an observation."""
    if generated is None:
        return "environment_done"
    if is_capped or generated.finish_reason == "length":
        return "length"
    return "stop"
