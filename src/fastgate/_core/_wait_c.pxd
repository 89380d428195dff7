cimport cython

@cython.final
@cython.freelist(64)
cdef class Ready:
    pass


@cython.final
@cython.freelist(64)
cdef class Wait:
    cdef object ctx
    cdef object future

    cdef object _resume(self)
