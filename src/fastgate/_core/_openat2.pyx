# cython: language_level=3
"""One system call that tells whether a path names an object without any symlink on the way.

``openat2(2)`` with ``RESOLVE_NO_SYMLINKS`` opens a path only if no component of it, the last
included, is a symlink (else ``ELOOP``). For an absolute path in normal form (no ``.``, ``..``,
``//`` or trailing ``/``) that opens, the path itself is therefore its canonical form: there is
nothing to resolve. ``fastgate.paths`` uses this to skip reading the kernel's name back from
``/proc`` (two more system calls) for the common case of a plain path; any other answer sends it
down that route as before.

Only the compiled build has it (Python has no binding for openat2); the pure build answers the
same questions by the /proc route. Kernels before 5.6, and sandboxes that filter the call, return
``ENOSYS`` or ``EPERM``; the caller then stops asking (a path with a NUL byte is answered
``EINVAL`` without asking the kernel).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.string cimport strlen

cdef extern from "Python.h":
    object PyUnicode_EncodeFSDefault(object)

cdef extern from *:
    """
    #include <errno.h>
    #if defined(__linux__)
    #include <fcntl.h>
    #include <stdint.h>
    #include <sys/syscall.h>
    #include <unistd.h>
    #endif
    #if defined(__linux__) && defined(SYS_openat2) && defined(O_PATH)
    /* struct open_how of <linux/openat2.h>, spelt out so the build needs no kernel headers. */
    struct fastgate_open_how { uint64_t flags; uint64_t mode; uint64_t resolve; };
    #define FASTGATE_RESOLVE_NO_SYMLINKS 0x04
    static int fastgate_open_no_symlinks(const char *path, int directory) {
        struct fastgate_open_how how;
        long fd;
        how.flags = O_PATH | O_CLOEXEC | (directory ? O_DIRECTORY : 0);
        how.mode = 0;
        how.resolve = FASTGATE_RESOLVE_NO_SYMLINKS;
        fd = syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
        if (fd < 0) return errno;
        close((int)fd);
        return 0;
    }
    #else
    static int fastgate_open_no_symlinks(const char *path, int directory) {
        (void)path; (void)directory;
        return ENOSYS;
    }
    #endif
    """
    int fastgate_open_no_symlinks(const char *path, int directory) nogil


def open_no_symlinks(str path, bint directory):
    """0 if ``path`` opens (``O_PATH``; with ``directory``, only as a directory) and no
    component of it is a symlink, else the errno (``ELOOP``: a symlink is on the way). A path
    with a NUL byte is ``EINVAL``."""
    cdef bytes encoded = PyUnicode_EncodeFSDefault(path)
    cdef const char *raw = PyBytes_AS_STRING(encoded)
    cdef int wanted = directory
    cdef int error
    if <Py_ssize_t>strlen(raw) != PyBytes_GET_SIZE(encoded):
        return 22  # EINVAL: such a path names nothing (os.open would refuse it)
    # A file system may block (NFS, FUSE): other threads run meanwhile, as around os.open.
    with nogil:
        error = fastgate_open_no_symlinks(raw, wanted)
    return error
