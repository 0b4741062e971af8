"""Validation of the SGLang double's ``/generate`` bodies, like SGLang 0.5.x: exactly one of
``text`` / ``input_ids`` / ``input_embeds``; unknown ``sampling_params`` keys, wrong JSON types
and out-of-range values are 400 ``{"error": {"message"}}``; wrongly typed top-level fields are
FastAPI's 422 ``{"detail"}``; an input the KV pool cannot hold is 400
(``Scheduler.validate_input_length``); a ``priority`` sent to a server without priority
scheduling that runs with ``--abort-on-priority-when-disabled`` is 503
(``Scheduler._set_or_validate_priority``).
"""

from __future__ import annotations

import math
import time
from typing import Any

from double_scheduler import BadRequest, DoubleConfig, Req, error

SAMPLING_KEYS: dict[str, tuple[type, ...]] = {
    "max_new_tokens": (int,), "stop": (str, list), "stop_token_ids": (list,),
    "stop_regex": (str, list), "temperature": (float, int), "top_p": (float, int),
    "top_k": (int,), "min_p": (float, int), "frequency_penalty": (float, int),
    "presence_penalty": (float, int), "repetition_penalty": (float, int),
    "min_new_tokens": (int,), "n": (int,), "json_schema": (str,), "regex": (str,),
    "ebnf": (str,), "structural_tag": (str,), "ignore_eos": (bool,),
    "skip_special_tokens": (bool,), "spaces_between_special_tokens": (bool,),
    "no_stop_trim": (bool,), "custom_params": (dict,), "stream_interval": (int,),
    "logit_bias": (dict,), "sampling_seed": (int,),
}  # fmt: skip
"""The API keys of SGLang's ``SamplingParams`` and the JSON types each accepts."""


def _type_error(field_name: str, expected: str) -> BadRequest:
    item = {"loc": ["body", field_name], "msg": f"Input should be {expected}", "type": "type"}
    return BadRequest(422, {"detail": [item]})


def parse_generate(body: Any, config: DoubleConfig, arrival: int) -> tuple[Req, bool]:
    """Validate a ``/generate`` body like SGLang; the request and its ``stream`` flag."""
    if not isinstance(body, dict):
        raise _type_error("", "a valid dictionary")
    given = [key for key in ("text", "input_ids", "input_embeds") if body.get(key) is not None]
    if len(given) != 1:
        raise error("Either text, input_ids or input_embeds should be provided (exactly one).")
    if "input_embeds" in given:
        raise error("input_embeds is not supported by this server")
    input_ids = _input_ids(body)
    params = _sampling(body.get("sampling_params") or {})
    max_new = params.get("max_new_tokens", 128)
    if len(input_ids) + max_new > config.context_length:
        raise error(
            f"Requested token count exceeds the model's maximum context length of "
            f"{config.context_length} tokens."
        )
    for name, kind in (("priority", int), ("rid", str), ("stream", bool)):
        value = body.get(name)
        if value is not None and (
            not isinstance(value, kind) or isinstance(value, bool) != (kind is bool)
        ):
            raise _type_error(name, f"a valid {kind.__name__}")
    _check_fits(input_ids, config)
    _check_priority(body, config)
    req = Req(
        rid=body.get("rid") or f"auto{arrival:012d}", input_ids=input_ids, max_new_tokens=max_new,
        stop_token_ids=frozenset(params.get("stop_token_ids") or ()),
        ignore_eos=params.get("ignore_eos", False),
        priority=body.get("priority") if config.priority_scheduling else None,
        return_logprob=bool(body.get("return_logprob")), arrival=arrival,
        created_s=time.monotonic(),
    )  # fmt: skip
    return req, bool(body.get("stream"))


def _check_fits(input_ids: list[int], config: DoubleConfig) -> None:
    """SGLang's ``max_req_input_len``: one below the context and below the KV pool."""
    limit = min(config.context_length, config.max_total_num_tokens) - 1
    if len(input_ids) >= limit:
        raise error(
            f"Input length ({len(input_ids)} tokens) exceeds the maximum allowed length "
            f"({limit} tokens). Use a shorter input or enable --allow-auto-truncate."
        )


PRIORITY_DISABLED = (
    "Using priority is disabled for this server. Please send a new request without a priority."
)


def _check_priority(body: dict[str, Any], config: DoubleConfig) -> None:
    """A priority without priority scheduling: SGLang ignores it, or with
    ``--abort-on-priority-when-disabled`` aborts the request with 503 (FastAPI's
    ``{"detail"}`` from the ``HTTPException`` the tokenizer manager raises)."""
    if body.get("priority") is None or config.priority_scheduling:
        return
    if config.abort_on_priority_when_disabled:
        raise BadRequest(503, {"detail": PRIORITY_DISABLED})


def _input_ids(body: dict[str, Any]) -> list[int]:
    if body.get("text") is not None:
        if not isinstance(body["text"], str):
            raise _type_error("text", "a valid string")
        return list(body["text"].encode())
    ids = body["input_ids"]
    if not isinstance(ids, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in ids
    ):
        raise _type_error("input_ids", "a list of integers")
    if not ids:
        raise error("input_ids cannot be empty.")
    return ids


def _sampling(params: Any) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise _type_error("sampling_params", "a valid dictionary")
    for key, value in params.items():
        if key not in SAMPLING_KEYS:
            raise error(f"SamplingParams.__init__() got an unexpected keyword argument '{key}'")
        kinds = SAMPLING_KEYS[key]
        if value is not None and (
            not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)
        ):
            expected = "/".join(kind.__name__ for kind in kinds)
            raise error(f"sampling_params.{key}: expected {expected}, got {value!r}")
    _verify(params)
    return params


def _verify(params: dict[str, Any]) -> None:
    """SGLang's ``SamplingParams.verify`` range checks (message texts as SGLang words them)."""
    temperature, top_p = params.get("temperature", 1.0), params.get("top_p", 1.0)
    if not math.isfinite(temperature) or temperature < 0:
        raise error(f"temperature must be a non-negative finite number, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise error(f"top_p must be in (0, 1], got {top_p}.")
    max_new = params.get("max_new_tokens", 128)
    if max_new is not None and max_new < 0:
        raise error(f"max_new_tokens must be at least 0, got {max_new}.")
    stop_ids = params.get("stop_token_ids") or []
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
        raise error("stop_token_ids must be a list of integers")
