# cython: language_level=3
"""How many names a regular file has: one ``stat(2)`` and no Python object on the way.

The permission check that catches a hard link to a protected file asks this of every path a
writing call names. ``os.stat`` answers it by building a whole ``stat_result`` (each time as a
float and as a nanosecond integer), several times the cost of the system call itself. Only the
compiled build has this; the pure build asks ``os.stat`` (``fastgate._core``).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.string cimport strlen
from posix.stat cimport S_ISREG, stat, struct_stat

cdef extern from "Python.h":
    object PyUnicode_EncodeFSDefault(object)


def regular_file_links(str path):
    """The link count of the regular file ``path`` names (symlinks followed), or 0: not a
    regular file, nothing there, or nothing that can be examined (a NUL byte included)."""
    cdef bytes encoded = PyUnicode_EncodeFSDefault(path)
    cdef const char *raw = PyBytes_AS_STRING(encoded)
    cdef struct_stat info
    cdef int failed
    if <Py_ssize_t>strlen(raw) != PyBytes_GET_SIZE(encoded):
        return 0
    # A file system may block (NFS, FUSE): other threads run meanwhile, as around os.stat.
    with nogil:
        failed = stat(raw, &info)
    if failed != 0 or not S_ISREG(info.st_mode):
        return 0
    return info.st_nlink
