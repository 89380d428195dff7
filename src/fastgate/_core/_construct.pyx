# cython: language_level=3
"""Let a compiled class be called the way compiled functions are: through vectorcall.

Calling a class that mypyc compiled goes through ``type.__call__``: CPython first packs the
keyword arguments into a tuple and a dict, and the class's ``__init__`` wrapper then parses them
back, by name, with the generic parser (for ``ExecutionContext(session_id=..., ...)``, about
three quarters of what making the context costs). A compiled *function* is called through
vectorcall instead: its arguments stay on the caller's stack and the keyword names, interned,
are matched by identity first.

``route_construction(cls, factory)`` makes every call of ``cls`` a vectorcall of ``factory``,
a compiled function with the very same parameters that returns ``cls(...)`` (a native
construction there). Only one class is routed, once; the class must not be subclassed (a
subclass would inherit the slot and construct the base).
"""

cdef extern from *:
    """
    static PyObject *fastgate_construct_factory = NULL;

    static PyObject *
    fastgate_construct_vectorcall(PyObject *cls, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames)
    {
        (void)cls;
        /* The caller's stack as given, flag included: the factory may use the slot before
           args[0] exactly as the class call could have. */
        return PyObject_Vectorcall(fastgate_construct_factory, args, nargsf, kwnames);
    }

    static int
    fastgate_route_construction(PyObject *cls, PyObject *factory)
    {
        if (fastgate_construct_factory != NULL) {
            return -1;
        }
        Py_INCREF(factory);
        fastgate_construct_factory = factory;
        ((PyTypeObject *)cls)->tp_vectorcall = fastgate_construct_vectorcall;
        return 0;
    }
    """
    int fastgate_route_construction(object cls, object factory)


def route_construction(type cls, factory):
    """Make ``cls(...)`` call ``factory(...)`` (see the module's docstring)."""
    if not callable(factory):
        raise TypeError("the factory must be callable")
    if fastgate_route_construction(cls, factory) != 0:
        raise RuntimeError("a class is already routed; only one is")
