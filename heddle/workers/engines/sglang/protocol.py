"""SGLang's native HTTP API as typed wire structs: what we send and what we read back.

Checked against the sglang source (sgl-project/sglang, 0.5.x):
- ``python/sglang/srt/managers/io_struct.py``: ``GenerateReqInput`` (``input_ids``,
  ``sampling_params``, ``rid``, ``stream``, ``return_logprob``, ``logprob_start_len``,
  ``priority: Optional[int]``, ``extra_key``), ``GetLoadsReqOutput`` (one entry per DP rank of
  ``/v1/loads``).
- ``python/sglang/srt/sampling/sampling_params.py``: the sampling keys and their checks
  (``max_new_tokens >= 0``, ``temperature >= 0``, ``0 < top_p <= 1``, ``sampling_seed``).
- ``python/sglang/srt/entrypoints/http_server.py``: ``/generate`` streams ``data: {...}`` frames
  then ``data: [DONE]``; a stream error is a frame ``{"error": {"message": ...}}``; a rejected
  request is HTTP 400 ``{"error": {"message": ...}}``; FastAPI errors are ``{"detail": ...}``.
- ``python/sglang/srt/entrypoints/v1_loads.py``: ``/v1/loads`` returns
  ``{"timestamp", "version", "accelerator", "num_accelerators", "loads": [...]}``.

Only this package knows these shapes. We never import sglang.
"""

from __future__ import annotations

import msgspec

MAX_PRIORITY = 2**31 - 1
"""SGLang's priority is a Python int; we keep it in the int32 range every backend accepts."""


class SamplingParamsWire(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The ``sampling_params`` object. Omitted fields take SGLang's defaults (which are these).

    SGLang builds its ``SamplingParams`` from this dict, so an unknown key is rejected: this
    struct names only keys that exist in 0.5.x.
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    sampling_seed: int | None = None


class GenerateBody(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The body of ``POST /generate``.

    ``logprob_start_len`` is never sent: its default (-1) asks for output logprobs only, and any
    value >= 0 would limit prefix-cache reuse.
    """

    input_ids: list[int]
    sampling_params: SamplingParamsWire
    rid: str
    priority: int | None = None
    return_logprob: bool = False
    stream: bool = False
    extra_key: str | None = None


class AbortBody(msgspec.Struct, frozen=True, kw_only=True):
    """The body of ``POST /abort_request``. SGLang aborts every rid that starts with ``rid``."""

    rid: str = ""
    abort_all: bool = False


class UpdateWeightsBody(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The body of ``POST /update_weights_from_disk`` (``UpdateWeightFromDiskReqInput`` of
    sgl-project/sglang ``python/sglang/srt/managers/io_struct.py``). Only fields every 0.5.x
    release has are sent; omitted ones keep SGLang's defaults: ``abort_all_requests`` false
    (in-flight requests finish first), the radix cache flushed after the load."""

    model_path: str
    """A Hugging Face checkpoint folder the server can read."""
    load_format: str | None = None
    """SGLang's loader format (``auto``, ``safetensors``, ``pt``, ...); None: the server's."""
    weight_version: str | None = None
    """Recorded by the server as its weight version (ours, as text)."""


class UpdateWeightsReply(msgspec.Struct, frozen=True, kw_only=True):
    """Its answer (HTTP 200 on success, 400 on failure): ``http_server.py``."""

    success: bool
    message: str = ""
    num_paused_requests: int | None = 0


class FinishReasonWire(msgspec.Struct, frozen=True, kw_only=True):
    """``meta_info.finish_reason``: ``{"type": "stop", "matched": ...}``, ``{"type": "length",
    "length": n}`` or ``{"type": "abort", "message": ...}``."""

    type: str
    matched: int | str | None = None
    length: int | None = None
    message: str | None = None
    status_code: int | None = None


class MetaInfo(msgspec.Struct, frozen=True, kw_only=True):
    """``meta_info`` of a generate response; fields a version lacks keep their defaults."""

    id: str = ""
    finish_reason: FinishReasonWire | None = None
    """None while a streamed request is still running."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    e2e_latency: float = 0.0
    num_retractions: int = 0
    """Times SGLang's own scheduler retracted the request (KV dropped, recomputed)."""
    weight_version: str | int | None = None
    output_token_logprobs: list[tuple[float | None, int, str | None]] | None = None
    """One ``[logprob, token_id, text|null]`` per output token (when ``return_logprob``)."""


class GenerateOutput(msgspec.Struct, frozen=True, kw_only=True):
    """A ``/generate`` response, or one streamed frame of it."""

    output_ids: list[int] = []
    meta_info: MetaInfo = MetaInfo()
    text: str = ""

    @property
    def is_finished(self) -> bool:
        return self.meta_info.finish_reason is not None

    @property
    def output_logprobs(self) -> list[float]:
        """Logprob of each output token (0.0 where SGLang sent none)."""
        entries = self.meta_info.output_token_logprobs or []
        return [entry[0] if entry[0] is not None else 0.0 for entry in entries]


class ErrorDetail(msgspec.Struct, frozen=True, kw_only=True):
    message: str = ""


class StreamFrame(msgspec.Struct, frozen=True, kw_only=True):
    """One SSE ``data:`` payload: an output frame, or ``{"error": {"message": ...}}``."""

    output_ids: list[int] = []
    meta_info: MetaInfo | None = None
    text: str = ""
    error: ErrorDetail | None = None

    def to_output(self) -> GenerateOutput:
        return GenerateOutput(
            output_ids=self.output_ids, meta_info=self.meta_info or MetaInfo(), text=self.text
        )


class RankLoad(msgspec.Struct, frozen=True, kw_only=True):
    """One DP rank's entry of ``/v1/loads``."""

    dp_rank: int | None = 0
    num_running_reqs: int | None = 0
    num_waiting_reqs: int | None = 0
    num_used_tokens: int | None = 0
    max_total_num_tokens: int | None = 0
    token_usage: float | None = 0.0
    cache_hit_rate: float | None = 0.0
    gen_throughput: float | None = 0.0
    max_running_requests: int | None = 0


class LoadsReport(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/loads``."""

    loads: list[RankLoad] = []
    version: str | None = None
    num_accelerators: int | None = None

    @property
    def num_running(self) -> int:
        return sum(load.num_running_reqs or 0 for load in self.loads)

    @property
    def num_waiting(self) -> int:
        return sum(load.num_waiting_reqs or 0 for load in self.loads)

    @property
    def max_running_requests(self) -> int:
        return sum(load.max_running_requests or 0 for load in self.loads)

    @property
    def max_total_num_tokens(self) -> int:
        return sum(load.max_total_num_tokens or 0 for load in self.loads)

    @property
    def token_usage(self) -> float:
        """The fullest rank's usage: the rank that runs out first decides admission."""
        return max((load.token_usage or 0.0 for load in self.loads), default=0.0)


class ServerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of ``GET /server_info`` we use (server args merged with scheduler info)."""

    model_path: str = ""
    served_model_name: str | None = None
    tp_size: int = 1
    dp_size: int = 1
    page_size: int | None = 1
    max_running_requests: int | None = None
    max_total_num_tokens: int | None = None
    context_length: int | None = None
    """The server's ``--context-length`` (None: the model's own, then read as
    ``max_req_input_len`` of the scheduler's info where the server reports it)."""
    max_req_input_len: int | None = None
    enable_priority_scheduling: bool = False
    schedule_low_priority_values_first: bool = False
    incremental_streaming_output: bool = False
    version: str | None = None

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_path

    @property
    def max_context_tokens(self) -> int:
        """The longest context the server takes (0: it does not say)."""
        return self.context_length or self.max_req_input_len or 0


class RouterWorker(msgspec.Struct, frozen=True, kw_only=True):
    url: str
    is_healthy: bool = True


class RouterWorkers(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /workers`` of an ``sglang-router`` (0.3.x): the servers it routes to."""

    workers: list[RouterWorker] = []


class StreamMerger:
    """Turns streamed frames into the whole output so far.

    By default every SGLang frame already carries the whole output; with
    ``--incremental-streaming-output`` frames carry only what is new, so ids, logprobs and text
    are appended here.
    """

    def __init__(self, *, incremental: bool) -> None:
        self.incremental = incremental
        self._output_ids: list[int] = []
        self._logprobs: list[tuple[float | None, int, str | None]] = []
        self._text = ""

    def add(self, frame: GenerateOutput) -> GenerateOutput:
        if not self.incremental:
            return frame
        self._output_ids.extend(frame.output_ids)
        self._logprobs.extend(frame.meta_info.output_token_logprobs or [])
        self._text += frame.text
        meta_info = msgspec.structs.replace(
            frame.meta_info, output_token_logprobs=list(self._logprobs)
        )
        return GenerateOutput(
            output_ids=list(self._output_ids), meta_info=meta_info, text=self._text
        )


def to_priority(priority: float, scale: float) -> int:
    """SGLang's integer priority (larger = more important) for our float priority."""
    scaled = round(priority * scale)
    return max(-MAX_PRIORITY, min(MAX_PRIORITY, scaled))


encode_json = msgspec.json.Encoder().encode
decode_output = msgspec.json.Decoder(GenerateOutput).decode
decode_frame = msgspec.json.Decoder(StreamFrame).decode
decode_loads = msgspec.json.Decoder(LoadsReport).decode
decode_router_workers = msgspec.json.Decoder(RouterWorkers).decode
decode_server_info = msgspec.json.Decoder(ServerInfo).decode
decode_update_weights = msgspec.json.Decoder(UpdateWeightsReply).decode
