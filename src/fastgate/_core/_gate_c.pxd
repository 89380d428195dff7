cimport cython

cdef int QUEUED, GRANTED, FINISHED


@cython.final
cdef class GateWaiter:
    cdef public bint exclusive
    cdef public object future
    cdef public int state
    cdef public GateWaiter prev
    cdef public GateWaiter next


@cython.final
cdef class GateCore:
    cdef public object ready
    cdef public object wait_type
    cdef public object get_loop
    cdef public Py_ssize_t shared_running
    cdef public bint exclusive_running
    cdef public Py_ssize_t queued
    cdef public GateWaiter head
    cdef public GateWaiter tail
    cdef public bint closed

    cpdef bint try_enter(self, bint exclusive)
    cpdef GateWaiter enqueue(self, bint exclusive, object future)
    cdef void _unlink(self, GateWaiter waiter)
    cdef list _grant_from_head(self)
    cpdef object leave(self, bint exclusive)
    cpdef object finish(self, GateWaiter waiter)
    cpdef object remove(self, GateWaiter waiter)
    cpdef object withdraw(self, GateWaiter waiter)
    cpdef wake(self, list granted)
    cpdef object queue(self, GateEntry entry)
    cpdef list close(self)
    cpdef GateEntry shared_entry(self)
    cpdef GateEntry exclusive_entry(self)


@cython.final
cdef class GateEntry:
    cdef public GateCore core
    cdef public bint exclusive
    cdef public GateWaiter waiter
    cdef public bint held
    cdef public bint used
