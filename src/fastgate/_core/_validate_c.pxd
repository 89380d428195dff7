cimport cython

cdef int K_NULL, K_BOOL, K_INT, K_INTFLOAT, K_FLOAT, K_STR, K_ARR, K_OBJ, K_NONFINITE, K_OTHER, K_ANY
cdef int C_STR, C_NUM, C_ENUM, C_CONST, C_OBJ, C_ARR, C_APPLY, C_FALSE, C_COND, _LOCAL_CHECKS
cdef int S_ANY, S_ONE, S_NOT, S_IF
cdef object _HERE
cdef list _NO_BRANCHES
cdef tuple _PLAIN_KINDS
cdef int INLINE_DEPTH
cdef Py_ssize_t WORK_FLOOR, WORK_PER_VALUE, WORK_SIZE_CAP


@cython.final
cdef class ValidationIssue:
    cdef object _path
    cdef object _keyword
    cdef object _message


@cython.final
cdef class Node:
    cdef public str pointer
    cdef public int types
    cdef public tuple type_names
    cdef public str expected
    cdef public int checks
    cdef public bint leaf
    cdef public object plain_type
    cdef public Py_ssize_t min_length
    cdef public Py_ssize_t max_length
    cdef public object pattern
    cdef public str pattern_source
    cdef public tuple pattern_runs
    cdef public object minimum
    cdef public object maximum
    cdef public object exclusive_minimum
    cdef public object exclusive_maximum
    cdef public object multiple_of
    cdef public object enum_keys
    cdef public list enum_values
    cdef public object const_key
    cdef public object const_value
    cdef public dict properties
    cdef public tuple required
    cdef public dict prop_table
    cdef public tuple prop_names
    cdef public tuple prop_slots
    cdef public tuple prop_nodes
    cdef public tuple required_declared
    cdef public tuple required_undeclared
    cdef public Node additional
    cdef public bint additional_false
    cdef public Py_ssize_t min_properties
    cdef public Py_ssize_t max_properties
    cdef public list prefix
    cdef public Node items
    cdef public bint items_false
    cdef public Py_ssize_t min_items
    cdef public Py_ssize_t max_items
    cdef public bint unique
    cdef public list all_of
    cdef public list any_of
    cdef public list one_of
    cdef public Node not_
    cdef public Node ref
    cdef public Node if_
    cdef public Node then_
    cdef public Node else_
    cdef public tuple dependent_required
    cdef public tuple dependent_schemas
    cdef public object disc_key
    cdef public dict disc_map
    cdef public bint disc_required


@cython.final
cdef class Loc:
    cdef public Loc parent
    cdef public object key


@cython.locals(loc=Loc)
cdef Loc _new_loc(Loc parent, object key)


@cython.final
cdef class Budget:
    cdef public Py_ssize_t used
    cdef public Py_ssize_t limit
    cdef public object value
    cdef public bint sized


@cython.locals(budget=Budget)
cdef Budget _new_budget(object value)
cdef int _spend(Budget budget) except -1
@cython.locals(total=Py_ssize_t, stack=list, kind=int)
cdef Py_ssize_t _size(object value, Py_ssize_t cap) except -1
cdef object _keyed(object value, Budget budget)


@cython.final
cdef class Sink:
    cdef public list issues
    cdef public Py_ssize_t count
    cdef public Py_ssize_t limit
    cdef public bint silent
    cdef public Budget budget


@cython.final
cdef class Step:
    cdef public int op
    cdef public Node node
    cdef public object value
    cdef public object loc
    cdef public Sink sink
    cdef public list branches
    cdef public Py_ssize_t index
    cdef public Py_ssize_t passed
    cdef public Py_ssize_t first_passed
    cdef public Sink sub


@cython.final
cdef class Validator:
    cdef public Node root
    cdef public object schema
    cdef public Py_ssize_t max_issues
    @cython.locals(budget=Budget, sink=Sink)
    cpdef list validate(self, object value)
    @cython.locals(budget=Budget)
    cpdef bint is_valid(self, object value) except -1


@cython.locals(t=object)
cdef inline int _kind(object value) except -1
cdef int _float_kind(double value) except -1
@cython.locals(kind=int, item_kind=int, out=list, stack=list, index=Py_ssize_t, is_token=bint, pairs=list)
cpdef object canonical(object value)
cdef str _json_string(str text)
cdef str _scalar_token(object item, int kind)
cdef str _int_token(object number)
cdef inline str _text(object value)
cdef str _key_text(object key)
cdef bint _is_multiple(object value, object divisor) except -1
cdef object _exact(object number)
@cython.locals(keys=list)
cpdef tuple materialize(Loc loc)
@cython.locals(index=Py_ssize_t, text=str)
cpdef str field_name(tuple path)
cdef dict _SEGMENTS
@cython.locals(text=object, name=str)
cdef str _segment(object key)
@cython.locals(parts=list, size=Py_ssize_t, first=str)
cdef list _segments(tuple path)
@cython.locals(parts=list)
cdef str _message(tuple path, str text)
cdef str _quote(str text)
cdef str _escape(str text)
@cython.locals(kind=int)
cpdef str describe(object value)
@cython.locals(number=object, exponent=object)
cdef str _number(object value)
@cython.locals(kind=int)
cdef str _literal(object value)
cdef str _choices(list values)
@cython.locals(names=tuple, shown=str)
cdef str _allowed_names(Node node)
@cython.locals(text=str)
cdef str _cut(object name)
@cython.locals(names=list)
cdef str _expected_types(Node node)
cdef int add_issue(Sink sink, object loc, str keyword, str text) except -1
@cython.locals(path=tuple, issue=ValidationIssue)
cdef int _add(Sink sink, object parent, object key, str keyword, str text) except -1
@cython.locals(keys=list, loc=Loc)
cdef tuple _path_to(Loc parent, object key)
cdef int _fail(Sink sink, object parent, object key, str keyword, Node node, object value) except -1
cdef str _explain(str keyword, Node node, object value)
@cython.locals(checks=int, length=Py_ssize_t)
cdef bint check_local(Node node, object value, int kind, object parent, object key, Sink sink) except -1
@cython.locals(runs=tuple, end=Py_ssize_t, pos=Py_ssize_t, run_=tuple, table=bytes, least=Py_ssize_t, most=Py_ssize_t, stop=Py_ssize_t, start=Py_ssize_t, code=Py_UCS4)
cdef bint _matches(Node node, str text) except -1
@cython.locals(sink=Sink)
cpdef Sink run(Node root, object value, Py_ssize_t limit, bint silent, Budget budget)
@cython.locals(stack=list, node=Node, current=Sink, step=Step, branch=Node)
cdef int _drain(Node root, object value, Sink sink) except -1
@cython.locals(kind=int, checks=int, budget=Budget)
cdef int _walk(Node node, object value, object parent, object key, Sink sink, list stack, int depth) except -1
cdef int _visit(Node node, object value, object parent, object key, Sink sink, list stack, int depth) except -1
@cython.locals(kind=int)
cdef inline int _check_item(Node child, object item, object loc, object key, Sink sink, list stack, int depth) except -1
cdef int _expand_object(Node node, object value, object loc, Sink sink, list stack, int depth) except -1
@cython.locals(table=dict, additional=Node, child=Node, slot=tuple, found=Py_ssize_t, names=tuple, slots=tuple, n_names=Py_ssize_t, guess=Py_ssize_t)
cdef int _match_keys(Node node, object value, object loc, Sink sink, list stack, int depth) except -1
@cython.locals(size=Py_ssize_t, names=tuple, slots=tuple, matched=Py_ssize_t, index=Py_ssize_t, n_names=Py_ssize_t, slot=tuple)
cdef void _look_up_declared(Node node, object value, object loc, Sink sink, list stack, int depth) except *
@cython.locals(table=dict, additional=Node)
cdef void _check_undeclared(Node node, object value, object loc, Sink sink, list stack, int depth) except *
cdef inline bint _same_key(str name, str declared)
cdef int _report_missing(tuple names, object value, object loc, Sink sink) except -1
cpdef void finish_node(Node node, int structural) except *
@cython.locals(length=Py_ssize_t, prefix=list, n_prefix=Py_ssize_t, items=Node, index=Py_ssize_t, child=Node)
cdef int _expand_array(Node node, object value, object loc, Sink sink, list stack, int depth) except -1
@cython.locals(seen=dict, index=Py_ssize_t, first=Py_ssize_t, budget=Budget)
cdef int _check_unique(object value, object loc, Sink sink) except -1
@cython.locals(sub=Node)
cdef int _expand_applicators(Node node, object value, object loc, Sink sink, list stack, int depth) except -1
@cython.locals(name=str, needed=tuple, sub=Node)
cdef int _expand_conditionals(Node node, object value, object loc, Sink sink, list stack, int depth) except -1
@cython.locals(other=str)
cdef int _report_dependent(str name, tuple needed, object value, object loc, Sink sink) except -1
@cython.locals(branch=Node, obj=dict)
cdef bint _discriminate(Node node, object value, object loc, Sink sink, list stack, int op, int depth) except -1
@cython.locals(sub=Sink, branch=Node)
cdef Node _advance(Step step, list stack)
@cython.locals(sub=Sink, branch=Node)
cdef Node _advance_if(Step step, list stack)
@cython.locals(sink=Sink)
cdef Sink _new_sink(Py_ssize_t limit, bint silent, Budget budget)
@cython.locals(kind=int, checks=int)
cdef bint _valid(Node node, object value, int depth, Budget budget) except -1
@cython.locals(checks=int, length=Py_ssize_t)
cdef bint _local_ok(Node node, object value, int kind, Budget budget) except -1
@cython.locals(kind=int)
cdef inline bint _valid_member(Node child, object item, int depth, Budget budget) except -1
@cython.locals(size=Py_ssize_t, names=tuple, children=tuple, n_names=Py_ssize_t, matched=Py_ssize_t, index=Py_ssize_t, additional=Node, table=dict)
cdef bint _valid_object(Node node, object value, int depth, Budget budget) except -1
@cython.locals(length=Py_ssize_t, prefix=list, n_prefix=Py_ssize_t, items=Node, index=Py_ssize_t, child=Node)
cdef bint _valid_array(Node node, object value, int depth, Budget budget) except -1
@cython.locals(seen=set)
cdef bint _all_unique(object value, Budget budget) except -1
@cython.locals(sub=Node, verdict=int, branch=Node, needed=tuple)
cdef bint _valid_applied(Node node, object value, int depth, Budget budget) except -1
@cython.locals(branch=Node)
cdef int _valid_by_discriminator(Node node, object value, int depth, Budget budget) except -2
@cython.locals(passed=Py_ssize_t, branch=Node)
cdef bint _exactly_one(list branches, object value, int depth, Budget budget) except -1
@cython.locals(branch=Node)
cdef bint _any_one(list branches, object value, int depth, Budget budget) except -1
cdef int _report_spent(Sink sink, Budget budget) except -1
