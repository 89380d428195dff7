cimport cython

cdef int QUEUED, GRANTED, FINISHED


@cython.final
cdef class KeyLock:
    cdef public str key
    cdef public object owner
    cdef public LockWaiter head
    cdef public LockWaiter tail
    cdef public Py_ssize_t waiting


@cython.final
cdef class LockWaiter:
    cdef public KeyLock lock
    cdef public object owner
    cdef public int state
    cdef public LockWaiter prev
    cdef public LockWaiter next
    cdef public object future


@cython.final
cdef class LockTableCore:
    cdef public object ready
    cdef public object wait_type
    cdef public object get_loop
    cdef public dict table

    @cython.locals(lock=KeyLock)
    cpdef bint try_lock(self, str key, object owner) except -1
    @cython.locals(lock=KeyLock, waiter=LockWaiter, tail=LockWaiter)
    cpdef LockWaiter enqueue(self, str key, object owner, object future)
    @cython.locals(lock=KeyLock, prev=LockWaiter, nxt=LockWaiter)
    cdef void _unlink(self, LockWaiter waiter)
    @cython.locals(lock=KeyLock, waiter=LockWaiter)
    cpdef LockWaiter unlock(self, str key)
    cpdef LockWaiter finish(self, LockWaiter waiter)
    cpdef bint remove(self, LockWaiter waiter) except -1
    cpdef LockWaiter withdraw(self, LockWaiter waiter)
    @cython.locals(waiter=LockWaiter, passed_on=LockWaiter, i=Py_ssize_t)
    cpdef wake(self, list granted)
    cpdef MultiLock multi(self, tuple keys, object owner)


@cython.final
cdef class MultiLock:
    cdef public LockTableCore core
    cdef public tuple keys
    cdef public object owner
    cdef public Py_ssize_t taken
    cdef public LockWaiter waiter
    cdef public bint held
    cdef public bint used

    @cython.locals(core=LockTableCore, keys=tuple, count=Py_ssize_t)
    cpdef bint take_available(self) except -1
    @cython.locals(core=LockTableCore, granted=list, waiter=LockWaiter)
    cpdef object release_taken(self)
    @cython.locals(core=LockTableCore, future=object)
    cpdef object wait_for_next(self)
    cpdef object granted(self)
    @cython.locals(core=LockTableCore, waiter=LockWaiter, passed_on=LockWaiter)
    cpdef abandon(self)
