cdef class Ready:
    pass
