cimport cython

@cython.final
cdef class Ready:
    pass


@cython.final
cdef class Wait:
    cdef object ctx
    cdef object future

    cdef object _resume(self)
