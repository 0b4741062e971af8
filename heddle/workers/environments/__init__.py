"""Environments: what a trajectory is about, turned into prompts, tool calls and a reward.

The contract with the rollout worker agent
------------------------------------------
One fresh environment per trajectory: ``create_environment(spec.environment, options)``.

1. ``observation = env.reset(spec.task)``: validates the task (``TaskError``, a ``ValueError``
   naming the field) and returns the prompt. When ``spec.prompt_token_ids`` is empty, the prompt
   is ``observation.tokens(tokenizer)`` (step 0's ``input_token_ids``); otherwise the spec's ids
   are the prompt and the reset observation is not appended.
2. Generate. When an observation has ``target_output_tokens`` (trace replay), pass it to the
   engine as ``GenerationRequest.target_output_tokens`` and cap ``max_new_tokens`` with it.
3. ``outcome = env.step(tokenizer.decode(generated_ids))``; a ``StepOutcome`` is exactly one of:
   - ``outcome.done``: publish ``Completed`` with ``outcome.reward``;
   - ``outcome.tool_request``: publish ``ToolCalled`` and send ``ToolCall(request=...)`` to the
     ``spec.tool_pool`` executors; when the ``ToolReturned`` arrives,
     ``outcome = env.observe(tool_returned)`` (done, or an observation);
   - ``outcome.observation``: feedback without a tool.
   For an observation: append ``observation.tokens(tokenizer)`` (the next step's
   ``GenerationStarted.input_token_ids``, loss mask 0) and go to 2.
4. The worker also ends the trajectory at ``spec.max_steps`` generations (``finish_reason
   length``); the built-ins stop themselves earlier (``max_turns`` options, or at the end of the
   trace), and every generation without a recognised action ends them with reward 0.

Calls out of this order raise ``EnvironmentStateError``.

Resuming (migration, re-placement): environments are deterministic functions of the task and
the history, so ``replay(fresh_env, task, history)`` rebuilds one, where the history is every
generation's decoded text, each followed by its ``ToolReturned`` when it requested a tool (from
the trajectory's events). It returns the prompt and the last outcome: a tool request there whose
result is missing from the history must be sent again (same call id).

Built-ins (``ENVIRONMENTS``; names feed CLI choices): ``trace``, ``math``, ``coding``,
``search``, ``token_class``; each module's docstring gives its task format and rules.
``read_tasks`` loads and checks a JSONL task file; samples ship in ``heddle/data/tasks``.

Modules: ``base`` (the contract: observations, step outcomes, the call-order state machine,
``replay``), ``registry`` (``ENVIRONMENTS``: typed options and a factory per name), ``tasks``
(``read_tasks``: JSONL task files), ``parsing`` (actions in generated text), ``answers`` (checking
answers: numeric tolerance, exact match, token F1), and the built-ins ``trace_env``, ``math_env``,
``coding_env``, ``search_env``, ``token_class_env`` (a toy RL task).
"""

from heddle.workers.environments.base import (
    Environment,
    EnvironmentStateError,
    HistoryItem,
    Observation,
    ReplayedState,
    StepOutcome,
    Task,
    TaskError,
    replay,
)
from heddle.workers.environments.registry import (
    ENVIRONMENTS,
    EnvironmentEntry,
    create_environment,
    environment_entry,
    environment_names,
    validate_task,
)
from heddle.workers.environments.tasks import SAMPLE_TASKS, read_tasks

__all__ = [
    "ENVIRONMENTS",
    "SAMPLE_TASKS",
    "Environment",
    "EnvironmentEntry",
    "EnvironmentStateError",
    "HistoryItem",
    "Observation",
    "ReplayedState",
    "StepOutcome",
    "Task",
    "TaskError",
    "create_environment",
    "environment_entry",
    "environment_names",
    "read_tasks",
    "replay",
    "validate_task",
]
