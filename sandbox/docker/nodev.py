"""Run a command unable to make device nodes: install a seccomp filter that refuses mknod and mknodat
of character and block devices (EPERM), then exec the command. Standard library only: it runs inside
the container (`python3 -I -S -B nodev.py CMD...`), under gVisor, for calls by `docker exec`.

Why: gVisor's tmpfs ignores `nodev` and its mknod needs no CAP_MKNOD, so a call could make
`/tmp/fuse` (c 10 229) and open gVisor's FUSE; runc refuses that already (every capability
dropped). The container's own seccomp profile does the same for its first process (runsc with
`--oci-seccomp`), but a process started by `docker exec` under gVisor does not get it: this does,
and everything the command starts inherits the filter.
"""

import ctypes
import errno
import os
import struct
import sys

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
LD_W_ABS, JEQ_K, JA, AND_K, RET_K = 0x20, 0x15, 0x05, 0x54, 0x06
FILE_TYPE, CHAR, BLOCK = 0o170000, 0o020000, 0o060000
# (audit arch, [(syscall number, index of its mode argument)])
ARCHES = (
    (0xC000003E, [(133, 1), (259, 2)]),  # x86_64: mknod, mknodat
    (0xC00000B7, [(33, 2)]),  # aarch64: mknodat (there is no mknod)
)


def program():
    """The classic-BPF filter, as (code, jt, jf, k) with jumps resolved."""
    code, fixups = [], []  # fixups: (index, field, label)

    def emit(op, jt=0, jf=0, k=0):
        code.append([op, jt, jf, k])
        return len(code) - 1

    labels = {}
    for a, (arch, calls) in enumerate(ARCHES):
        labels[f"arch{a}"] = len(code)
        emit(LD_W_ABS, k=4)
        fixups.append((emit(JEQ_K, k=arch), 2, f"arch{a + 1}" if a + 1 < len(ARCHES) else "allow"))
        emit(LD_W_ABS, k=0)
        for c, (number, arg) in enumerate(calls):
            last = c + 1 == len(calls)
            fixups.append((emit(JEQ_K, k=number), 2, "allow" if last else f"call{a}.{c + 1}"))
            emit(LD_W_ABS, k=16 + 8 * arg)
            fixups.append((emit(JA), 3, "check"))
            if not last:
                labels[f"call{a}.{c + 1}"] = len(code)
                emit(LD_W_ABS, k=0)
    labels["check"] = len(code)
    emit(AND_K, k=FILE_TYPE)
    fixups.append((emit(JEQ_K, k=CHAR), 1, "deny"))
    fixups.append((emit(JEQ_K, k=BLOCK), 1, "deny"))
    labels["allow"] = emit(RET_K, k=RET_ALLOW)
    labels["deny"] = emit(RET_K, k=RET_ERRNO | errno.EPERM)
    for index, field, label in fixups:
        code[index][field] = labels[label] - index - 1
    return [tuple(instruction) for instruction in code]


def install():
    libc = ctypes.CDLL(None, use_errno=True)
    filters = b"".join(struct.pack("HBBI", *instruction) for instruction in program())
    buffer = ctypes.create_string_buffer(filters)
    fprog = struct.pack("HxxxxxxP", len(filters) // 8, ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog)
    for option, args in (
        (PR_SET_NO_NEW_PRIVS, (1, 0, 0, 0)),
        (PR_SET_SECCOMP, (SECCOMP_MODE_FILTER, ctypes.addressof(fprog_buffer), 0, 0)),
    ):
        if libc.prctl(option, *[ctypes.c_ulong(a) for a in args]) != 0:
            raise OSError(ctypes.get_errno(), "prctl")


def main():
    if len(sys.argv) < 2:
        sys.stderr.write("usage: nodev.py CMD [ARG...]\n")
        return 2
    try:
        install()
    except OSError as error:
        sys.stderr.write("harness: cannot refuse device nodes in this sandbox: %s\n" % error)
        return 126
    try:
        os.execvp(sys.argv[1], sys.argv[1:])
    except OSError as error:
        sys.stderr.write("%s: %s\n" % (sys.argv[1], error.strerror))
        return 127 if error.errno == errno.ENOENT else 126


if __name__ == "__main__":
    sys.exit(main())
