"""Tool executors: run model-written code in a sandbox, search a local corpus, replay trace tools.

Modules: ``limits`` (typed limits and config), ``isolation`` (how a sandbox process is confined),
``bwrap`` (bubblewrap's command line), ``sandbox_child`` (the child script), ``sandbox_mounts``
(its file-system confinement and the runtime's paths), ``sandbox_seccomp`` (the process level's
network block), ``sandbox_protocol``
(request, status record, result), ``sandbox`` (one process, one call), ``sandbox_calls`` (a cold
call, the isolation probe), ``pool`` (pre-warmed processes scaled with demand), ``output``
(capped capture), ``search`` (BM25 over a local corpus), ``trace`` (pseudo-token replay),
``call_runner`` (a ``ToolRequest`` -> result), ``executor`` (the NATS service behind
``heddle tools serve``); its benchmark is ``heddle.bench.tools``.

What the sandbox guarantees (model code is untrusted input)
-----------------------------------------------------------
Every call runs in a separate, fresh process that is discarded afterwards; nothing (globals,
files, child processes) survives into the next call. Always, at every isolation level:

- wall-clock timeout: the whole process group is SIGKILLed (status ``timeout``);
- rlimits on the code's process: CPU time (SIGXCPU then SIGKILL: ``killed``), address space
  (``MemoryError`` reported as ``killed``, reason ``memory limit``), file size, open files, no
  core dumps;
- stdout and stderr are each capped at ``max_output_bytes``; the rest is drained and dropped, so
  memory stays bounded and a chatty program cannot block;
- a scratch directory as cwd (and HOME, TMPDIR), removed after the call.

Levels, strongest first; ``auto`` takes the first that a probe call shows working, and never
falls back to ``process`` unless allowed (``allow_unisolated``, ``--allow-unisolated``): without
that, no working isolated level is an error. The level in force is logged and published in the
executor's ``ExecutorRegistered`` event (``heddle status`` lists it).

``namespace`` isolation (root and util-linux ``unshare``, as on this project's machines) adds:

- a new network namespace with only a down loopback: every connect fails (ENETUNREACH), even to
  127.0.0.1; abstract unix sockets of the host are unreachable;
- a new PID namespace: the code sees only its own processes, and when the call ends its PID 1
  exits, so the kernel kills every process the code left behind (including ``setsid`` escapees);
- a private mount namespace with a read-only root that holds only what a call needs
  (``sandbox_mounts``): ``/usr``, ``/etc`` and the ``/lib*`` folders, the Python runtime (its
  prefixes and site folders), ``/dev`` and a ``/proc`` of the sandbox; nothing else of the host
  exists there (home folders, ``/root``, ``/srv``, ``/var``, a repository checkout and its
  ``.git``); ``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock`` get private size-capped tmpfs
  mounts that vanish with the call (the scratch dir is ``/tmp/sandbox`` there);
- the code runs under its own unprivileged uid (``uid_base`` + n, no groups, no capabilities), so
  RLIMIT_NPROC caps processes and threads per call (a fork bomb fails to fork) and files of other
  users stay untouchable.

Not guaranteed: reads of world-readable files under what the sandbox shows (``/usr``, ``/etc``,
the runtime); world-writable filesystem unix sockets there stay reachable; there is no seccomp
filter at these levels, so kernel attack surface is that of an unprivileged process. ``bwrap``
builds the same root (``heddle.workers.tools.bwrap``).

``process`` isolation (the fallback where namespaces are unavailable) keeps the "always" list
and adds only: a seccomp filter (``sandbox_seccomp``) that refuses every socket but ``AF_UNIX``,
and io_uring, to the code and every process it starts (``Isolation.blocks_network`` says
whether this machine takes one; where it does not, the network is open and the level says so),
with a Python audit hook that names the cause to Python code; when running as root with a
Python runtime other uids can read, the per-call uid as above (else RLIMIT_NPROC is the user's,
and for root it is not enforced, so fork bombs are only stopped by the timeout); leftover
processes are killed by process group (and by uid when one was assigned). Reads and writes
outside the scratch dir are limited only by the user's file permissions.

The unit-test runner shares its process with the code under test: its summary line is honest for
honest code but is not a guard against a model that deliberately forges it.
"""
