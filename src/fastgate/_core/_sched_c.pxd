cimport cython

cpdef int kind_index(object kind) except -1

cdef int NKINDS, NO_POOL, QUEUED, GRANTED, FINISHED, NEW, HELD, DONE, WAIT_SAMPLES


@cython.final
cdef class SessionQueue:
    cdef public object session_id
    cdef public list heads
    cdef public list tails
    cdef public list pool_lanes
    cdef public Py_ssize_t queued
    cdef public SessionQueue ring_prev
    cdef public SessionQueue ring_next
    cdef public SessionQueue bucket_prev
    cdef public SessionQueue bucket_next


cdef class SlotWaiter:
    cdef public SessionQueue queue
    cdef public object session_id
    cdef public int kind
    cdef public Py_ssize_t pool
    cdef public Py_ssize_t lane
    cdef public object owner
    cdef public Py_ssize_t seq
    cdef public int state
    cdef public SlotWaiter prev
    cdef public SlotWaiter next
    cdef public object future
    cdef public double enqueued_at



@cython.final
cdef class PoolTable:
    cdef public dict numbers
    cdef public list names
    cdef public list limits
    cdef public list in_flight
    cdef public list queued
    cdef Py_ssize_t kind_queued[3]

    cpdef add(self, str name, Py_ssize_t limit)
    cdef bint has_room(self, Py_ssize_t pool) except -1
    @cython.locals(pool=Py_ssize_t, base=Py_ssize_t)
    cpdef tuple counts(self)


@cython.final
cdef class QueueShares:
    cdef public list buckets
    cdef public Py_ssize_t top
    cdef public Py_ssize_t displaced

    @cython.locals(count=Py_ssize_t, buckets=list, prev=SessionQueue, nxt=SessionQueue,
                   head=SessionQueue)
    cdef int grew(self, SessionQueue queue) except -1
    @cython.locals(count=Py_ssize_t, buckets=list, prev=SessionQueue, nxt=SessionQueue,
                   head=SessionQueue)
    cdef int shrank(self, SessionQueue queue) except -1
    cdef SessionQueue most_queued(self)


@cython.final
cdef class SchedulerCore:
    cdef public object ready
    cdef public object wait_type
    cdef public object get_loop
    cdef public object clock
    cdef public object arm_expiry
    cdef public double queue_timeout
    cdef public double expiry_due
    cdef public list waits
    cdef public Py_ssize_t wait_index
    cdef public Py_ssize_t admitted_after_wait
    cdef public Py_ssize_t global_limit
    cdef public Py_ssize_t session_limit
    cdef Py_ssize_t kind_limits[3]
    cdef public Py_ssize_t max_queue
    cdef public Py_ssize_t in_flight
    cdef Py_ssize_t kind_in_flight[3]
    cdef Py_ssize_t kind_queued[3]
    cdef public PoolTable pools
    cdef public QueueShares shares
    cdef public dict session_in_flight
    cdef public dict queues
    cdef public SessionQueue cursor
    cdef public Py_ssize_t queued
    cdef public Py_ssize_t seq
    cdef public Py_ssize_t admitted
    cdef public Py_ssize_t rejected
    cdef public bint closed
    cdef public dict session_caps
    cdef public double lease_until

    @cython.locals(slot=Slot)
    cpdef Slot slot(self, object session_id, object kind, object owner=*, object pool=*)
    cpdef Py_ssize_t pool_number(self, object pool) except -1
    @cython.locals(number=Py_ssize_t, pools=PoolTable)
    cpdef object set_pool_limit(self, str name, Py_ssize_t limit)
    @cython.locals(held=Py_ssize_t, sessions=dict, kind_in_flight=cython.p_Py_ssize_t)
    cpdef bint try_acquire(self, object session_id, int kind) except -1
    @cython.locals(pools=PoolTable)
    cpdef bint try_acquire_in_pool(self, object session_id, int kind, Py_ssize_t pool) except -1
    @cython.locals(caps=dict)
    cdef bint _leased_room(self, object session_id, Py_ssize_t held) except -1
    @cython.locals(pools=PoolTable, number=Py_ssize_t)
    cpdef object set_limits(self, Py_ssize_t global_limit, list kind_limits, list pool_limits,
                            dict session_caps, double lease_until)
    @cython.locals(waiter=SlotWaiter, displaced=SlotWaiter)
    cpdef tuple enqueue(self, object session_id, int kind, object owner, Py_ssize_t pool=*)
    @cython.locals(shares=QueueShares, most=SessionQueue, queue=SessionQueue, mine=Py_ssize_t,
                   newest=SlotWaiter, tail=SlotWaiter, tails=list, lane=Py_ssize_t)
    cdef SlotWaiter _displace(self, object session_id)
    @cython.locals(queue=SessionQueue, tail=SlotWaiter, kind=int, pool=Py_ssize_t, lane=Py_ssize_t)
    cdef int _link(self, SlotWaiter waiter) except -1
    @cython.locals(lanes=list, i=Py_ssize_t)
    cdef Py_ssize_t _pool_lane(self, SessionQueue queue, Py_ssize_t key) except -1
    @cython.locals(held=Py_ssize_t, sessions=dict, kind_in_flight=cython.p_Py_ssize_t)
    cpdef object release(self, object session_id, int kind)
    @cython.locals(pools=PoolTable)
    cpdef object release_in_pool(self, object session_id, int kind, Py_ssize_t pool)
    cpdef object finish(self, SlotWaiter waiter)
    cpdef bint remove(self, SlotWaiter waiter) except -1
    cpdef object withdraw(self, SlotWaiter waiter)
    @cython.locals(waiter=SlotWaiter, future=object, now=double, due=double, displaced=SlotWaiter)
    cpdef object queue(self, Slot slot)
    @cython.locals(future=object)
    cdef int _fail_displaced(self, SlotWaiter waiter) except -1
    @cython.locals(waiter=SlotWaiter, i=Py_ssize_t, now=double)
    cpdef wake(self, list granted)
    @cython.locals(waiter=SlotWaiter, limit=double)
    cpdef list expire(self, double now)
    @cython.locals(waiter=SlotWaiter, oldest=double)
    cpdef double oldest_enqueued_at(self)
    @cython.locals(cursor=SessionQueue, last=SessionQueue)
    cdef void _ring_insert(self, SessionQueue queue)
    @cython.locals(nxt=SessionQueue, prev=SessionQueue)
    cdef int _ring_remove(self, SessionQueue queue) except -1
    @cython.locals(queue=SessionQueue)
    cdef int _forget_if_idle(self, object session_id) except -1
    @cython.locals(queue=SessionQueue, kind=int, pool=Py_ssize_t, lane=Py_ssize_t,
                   prev=SlotWaiter, nxt=SlotWaiter)
    cdef int _unlink(self, SlotWaiter waiter) except -1
    @cython.locals(kind=int, queued=Py_ssize_t, pool=Py_ssize_t, pools=PoolTable)
    cdef bint _any_lane_open(self) except -1
    @cython.locals(best=SlotWaiter, head=SlotWaiter, heads=list, lane=Py_ssize_t)
    cdef SlotWaiter _first_admissible(self, SessionQueue queue)
    @cython.locals(start=SessionQueue, queue=SessionQueue, waiter=SlotWaiter, held=Py_ssize_t)
    cdef list _grant(self)
    @cython.locals(queue=SessionQueue, waiter=SlotWaiter, lane=Py_ssize_t)
    cpdef list _queued_waiters(self)
    cpdef list cancel_owner(self, object owner)
    cpdef list close(self)
    cpdef tuple kind_counts(self)
    cpdef tuple pool_counts(self)
    cpdef tuple session_counts(self)


@cython.final
cdef class Slot(SlotWaiter):  # no freelist: only a base class can have one
    cdef public SchedulerCore core
    cdef public int phase
