"""The ``process`` level's network block, held by the kernel for the code and every process it
starts: a seccomp filter that refuses (EACCES) ``socket(2)`` of any family but ``AF_UNIX``, and
``io_uring_setup(2)`` (io_uring can open sockets without ``socket(2)``).

The Python audit hook of ``sandbox_child.block_sockets`` only sees Python code in the runner's
own interpreter: a child process (``subprocess``, ``os.exec*``) or ctypes straight to libc went
around it. A seccomp filter is inherited across ``fork`` and ``execve`` and cannot be removed.

Standard library only (the child script loads it as a sibling file). The program, in classic
BPF over ``struct seccomp_data`` (``nr`` at offset 0, ``arch`` at 4, ``args[0]`` at 16), refuses
every syscall of a foreign ABI (x86_64's x32 and i386 entry points reach ``socketcall``), then
``io_uring_setup``, then ``socket`` unless its domain is ``AF_UNIX``; it allows all else.
Reference: the kernel's Documentation/userspace-api/seccomp_filter.rst.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import socket
import struct

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_X32_SYSCALL_BIT = 0x40000000
_IO_URING_SETUP = 425
_ABIS = {
    # machine: (AUDIT_ARCH_*, __NR_socket)
    "x86_64": (0xC000003E, 41),
    "aarch64": (0xC00000B7, 198),
}


class _Filter(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _program(audit_arch: int, socket_nr: int) -> bytes:
    """The filter's instructions (8 bytes each: code, jump if true, jump if false, k)."""
    allow, deny = 8, 9
    steps = [
        (_LD_W_ABS, 0, 0, 4),  # 0: arch
        (_JEQ_K, 0, deny - 2, audit_arch),  # 1: a foreign ABI: deny
        (_LD_W_ABS, 0, 0, 0),  # 2: syscall number
        (_JGE_K, deny - 4, 0, _X32_SYSCALL_BIT),  # 3: x32 numbering: deny
        (_JEQ_K, deny - 5, 0, _IO_URING_SETUP),  # 4
        (_JEQ_K, 0, allow - 6, socket_nr),  # 5: not socket(2): allow
        (_LD_W_ABS, 0, 0, 16),  # 6: its domain (low half of args[0])
        (_JEQ_K, allow - 8, deny - 8, socket.AF_UNIX),  # 7
        (_RET_K, 0, 0, _SECCOMP_RET_ALLOW),  # 8
        (_RET_K, 0, 0, _SECCOMP_RET_ERRNO | errno.EACCES),  # 9
    ]
    return b"".join(struct.pack("=HBBI", *step) for step in steps)


def deny_network() -> bool:
    """Install the filter on this process (and so on everything it starts); False when this
    machine cannot (not Linux on x86_64 or aarch64, or seccomp refused), and nothing changed
    but ``no_new_privs``."""
    abi = _ABIS.get(platform.machine())
    if abi is None:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    program = ctypes.create_string_buffer(_program(*abi))
    filter_ = _Filter(len(program.raw) // 8, ctypes.cast(program, ctypes.c_void_p))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(filter_), 0, 0) == 0


if __name__ == "__main__":  # ``isolation.can_deny_network`` asks whether this machine takes it
    raise SystemExit(0 if deny_network() else 1)
