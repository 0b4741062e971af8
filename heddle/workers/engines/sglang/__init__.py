"""The ``sglang`` engine: drives a SGLang server over its native HTTP API (never imports sglang).

Modules, one concept each: ``protocol`` (wire structs), ``client`` (HTTP client with retries;
``http``: its errors, retry policy and response checks),
``local_queue`` (pure local priority queue), ``job`` (one generation as segments), ``segments``
(submitting one segment to the server), ``engine`` (the Engine protocol), ``routed`` (generation
through ``sglang-router``), ``supervisor`` (child-process supervision), ``launcher`` (launch
command and the registry factory), ``options`` (the registry's options dataclass).
"""
