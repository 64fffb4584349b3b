/* cachesync._speedups: Kafka's default partitioner hash and the consumer's per-event work, in C.
 *
 * The tailer computes every row's partition before packing (schema/partition.py); in
 * Python, murmur2 took about 4 % of the tailer thread on single-row transactions.
 * Built by `make install` (pyproject.toml, an optional extension); when it is missing,
 * schema/partition.py uses its pure-Python functions, which the same tests check.
 *
 * murmur2 is org.apache.kafka.common.utils.Utils.murmur2 (seed 0x9747b28c), returned
 * unsigned; partition_for is (murmur2(key) & 0x7fffffff) % partitions, as Kafka's
 * DefaultPartitioner (and kafka-python's) picks a keyed record's partition.
 *
 * event_from_doc builds the ChangeEvent of one parsed envelope when it has the plain shape
 * (schema/event.py, _from_doc: a row op, plain JSON values, no explicit keys or extra), and
 * returns None for anything else, never raising for bad input: the Python builder then
 * decides, with its exact errors. The consumer builds one per event; in Python it was
 * about a sixth of the consumer's time.
 *
 * companions names the fill-lease companion of each key the consumer deletes
 * (schema/slots.py, companions): <prefix>{<tag of the key's slot>}<key>.
 *
 * invalidation_keys renders the keys of a delete-mode row whose templates each name one
 * column (consumer/core/plan.py, _invalidations), and returns None for anything it does not
 * render exactly as Python does (a value other than str or int, a missing column, a
 * reserved key): Python then renders, raises and names the error.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* the positional argument count a METH_FASTCALL function takes; TypeError otherwise */
static int
arity(const char *name, Py_ssize_t nargs, Py_ssize_t expected)
{
    if (nargs == expected)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s expected %zd arguments, got %zd", name, expected, nargs);
    return 0;
}

static uint32_t
murmur2_of(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t body = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < body; i += 4) {
        uint32_t k = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 |
                     (uint32_t)data[i + 2] << 16 | (uint32_t)data[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[body + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[body + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)data[body];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static PyObject *
murmur2(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t h = murmur2_of((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(h);
}

static PyObject *
partition_for(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!arity("partition_for", nargs, 2))
        return NULL;
    /* a Kafka partition count is a positive int32 */
    long partitions = PyLong_AsLong(args[1]);
    if (partitions == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return NULL;
        PyErr_Clear();
    }
    if (partitions <= 0 || partitions > 0x7fffffffL) {
        PyErr_SetString(PyExc_ValueError, "partitions must be in 1..2147483647");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t h = murmur2_of((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)((h & 0x7fffffffu) % (unsigned long)partitions));
}

/* -- event_from_doc ---------------------------------------------------------------- */

/* the envelope's and the classes' field names, interned once (module init) */
enum {
    N_SRC, N_OP, N_PK, N_ID, N_DB, N_TBL, N_VER, N_V, N_KEYS, N_X, N_B, N_A,
    N_KIND, N_SERVER, N_POSITION, N_COMMIT_TS, N_ROW_INDEX,
    N_SOURCE, N_TABLE, N_BEFORE, N_AFTER, N_VERSION, N_SCHEMA_VERSION, N_EXTRA, N_COUNT
};
static const char *const NAME_TEXT[N_COUNT] = {
    "src", "op", "pk", "id", "db", "tbl", "ver", "v", "keys", "x", "b", "a",
    "kind", "server", "position", "commit_ts", "row_index",
    "source", "table", "before", "after", "version", "schema_version", "extra",
};
static PyObject *NAMES[N_COUNT];

static int
intern_names(void)
{
    for (int i = 0; i < N_COUNT; i++) {
        if (NAMES[i] == NULL) {
            NAMES[i] = PyUnicode_InternFromString(NAME_TEXT[i]);
            if (NAMES[i] == NULL)
                return -1;
        }
    }
    return 0;
}

static PyObject *
get(PyObject *doc, int name)          /* borrowed; NULL when absent (no error) */
{
    return PyDict_GetItem(doc, NAMES[name]);
}


/* every key of the dict is an exact str (PyDict_Next runs no Python code) */
static int
str_keys(PyObject *dict)
{
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(dict, &pos, &k, &v))
        if (!PyUnicode_CheckExact(k))
            return 0;
    return 1;
}

/* str, int (not bool), float, bool, None: what JSON carries as it is (_PLAIN) */
static int
is_plain(PyObject *v)
{
    return PyUnicode_CheckExact(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
           PyBool_Check(v) || v == Py_None;
}

static int
nonempty_str(PyObject *v)
{
    return v != NULL && PyUnicode_CheckExact(v) && PyUnicode_GET_LENGTH(v) > 0;
}

/* the image as _row_from_json returns it (the same dict), or NULL without an error set when
 * it is not plain; Py_None for a missing or null image (borrowed) */
static PyObject *
plain_image(PyObject *doc, int name)
{
    PyObject *row = get(doc, name);
    if (row == NULL || row == Py_None)
        return Py_None;
    if (!PyDict_CheckExact(row))
        return NULL;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(row, &pos, &k, &v))
        if (!PyUnicode_CheckExact(k) || !is_plain(v))
            return NULL;
    return row;
}

static int
in_kinds(PyObject *v, const char *const *kinds)
{
    if (v == NULL || !PyUnicode_CheckExact(v))
        return 0;
    for (; *kinds != NULL; kinds++)
        if (PyUnicode_CompareWithASCIIString(v, *kinds) == 0)
            return 1;
    return 0;
}

static const char *const SOURCE_KINDS[] = {"binlog", "outbox", "heartbeat", NULL};
static const char *const ROW_OPS[] = {"insert", "update", "delete", NULL};

/* a new instance of a plain Python class with ``fields`` as its __dict__, as
 * object.__new__(cls) then __dict__.update(fields) (no __init__, no __setattr__) */
static PyObject *
with_dict(PyObject *cls, PyObject *fields)
{
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "event_from_doc: the classes must be types");
        return NULL;
    }
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL)
        return NULL;
    PyObject *obj = PyBaseObject_Type.tp_new((PyTypeObject *)cls, empty, NULL);
    Py_DECREF(empty);
    if (obj == NULL)
        return NULL;
    if (PyObject_GenericSetDict(obj, fields, NULL) < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    return obj;
}

#define SET(d, name, value)                                     \
    do {                                                        \
        PyObject *v_ = (value);                                 \
        if (v_ == NULL || PyDict_SetItem(d, NAMES[name], v_) < 0) { \
            Py_XDECREF(v_);                                     \
            goto fail;                                          \
        }                                                       \
        Py_DECREF(v_);                                          \
    } while (0)

static PyObject *
event_from_doc(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!arity("event_from_doc", nargs, 3))
        return NULL;
    PyObject *doc = args[0], *event_cls = args[1], *source_cls = args[2];
    if (!PyDict_CheckExact(doc) || !str_keys(doc))
        Py_RETURN_NONE;
    /* Every key of doc (and of the images, plain_image) is an exact str, as a JSON parser
     * makes them: no lookup below runs Python code (a key of another type could run its
     * __eq__ and change doc under the borrowed references). */
    PyObject *src = get(doc, N_SRC);
    PyObject *op = get(doc, N_OP);
    PyObject *pk = get(doc, N_PK);
    PyObject *id = get(doc, N_ID);
    PyObject *db = get(doc, N_DB);
    PyObject *tbl = get(doc, N_TBL);
    PyObject *ver = get(doc, N_VER);
    PyObject *v = get(doc, N_V);
    PyObject *keys = get(doc, N_KEYS);
    PyObject *extra = get(doc, N_X);
    if (src == NULL || !PyList_CheckExact(src) || PyList_GET_SIZE(src) != 5 ||
        !in_kinds(op, ROW_OPS) || pk == NULL || !PyList_CheckExact(pk) ||
        !nonempty_str(id) || !nonempty_str(db) || !nonempty_str(tbl) ||
        ver == NULL || !PyLong_CheckExact(ver) || v == NULL)
        Py_RETURN_NONE;
    if ((keys != NULL && keys != Py_None) || (extra != NULL && extra != Py_None))
        Py_RETURN_NONE;              /* explicit keys, extra: the Python builder */
    PyObject *kind = PyList_GET_ITEM(src, 0), *server = PyList_GET_ITEM(src, 1);
    PyObject *position = PyList_GET_ITEM(src, 2), *commit_ts = PyList_GET_ITEM(src, 3);
    PyObject *row_index = PyList_GET_ITEM(src, 4);
    if (!in_kinds(kind, SOURCE_KINDS) || !PyUnicode_CheckExact(server) ||
        !PyUnicode_CheckExact(position) || !PyFloat_CheckExact(commit_ts) ||
        !PyLong_CheckExact(row_index))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(pk);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(pk, i);
        if (!PyList_CheckExact(pair) || PyList_GET_SIZE(pair) != 2 ||
            !PyUnicode_CheckExact(PyList_GET_ITEM(pair, 0)) ||
            !is_plain(PyList_GET_ITEM(pair, 1)))
            Py_RETURN_NONE;
    }
    PyObject *before = plain_image(doc, N_B), *after = plain_image(doc, N_A);
    if (before == NULL || after == NULL)
        Py_RETURN_NONE;

    PyObject *sfields = NULL, *efields = NULL, *source = NULL, *pk_tuple = NULL;
    pk_tuple = PyTuple_New(n);
    if (pk_tuple == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(pk, i);
        PyObject *t = PyTuple_Pack(2, PyList_GET_ITEM(pair, 0), PyList_GET_ITEM(pair, 1));
        if (t == NULL)
            goto fail;
        PyTuple_SET_ITEM(pk_tuple, i, t);
    }
    sfields = PyDict_New();
    if (sfields == NULL)
        goto fail;
    SET(sfields, N_KIND, Py_NewRef(kind));
    SET(sfields, N_SERVER, Py_NewRef(server));
    SET(sfields, N_POSITION, Py_NewRef(position));
    SET(sfields, N_COMMIT_TS, Py_NewRef(commit_ts));
    SET(sfields, N_ROW_INDEX, Py_NewRef(row_index));
    source = with_dict(source_cls, sfields);
    if (source == NULL)
        goto fail;
    efields = PyDict_New();
    if (efields == NULL)
        goto fail;
    SET(efields, N_ID, Py_NewRef(id));
    SET(efields, N_SOURCE, Py_NewRef(source));
    SET(efields, N_DB, Py_NewRef(db));
    SET(efields, N_TABLE, Py_NewRef(tbl));
    SET(efields, N_OP, Py_NewRef(op));
    SET(efields, N_PK, Py_NewRef(pk_tuple));
    SET(efields, N_BEFORE, Py_NewRef(before));
    SET(efields, N_AFTER, Py_NewRef(after));
    SET(efields, N_VERSION, Py_NewRef(ver));
    SET(efields, N_KEYS, PyTuple_New(0));
    SET(efields, N_SCHEMA_VERSION, Py_NewRef(v));
    SET(efields, N_EXTRA, PyDict_New());
    PyObject *event = with_dict(event_cls, efields);
    Py_DECREF(sfields);
    Py_DECREF(efields);
    Py_DECREF(source);
    Py_DECREF(pk_tuple);
    return event;
fail:
    Py_XDECREF(sfields);
    Py_XDECREF(efields);
    Py_XDECREF(source);
    Py_XDECREF(pk_tuple);
    return NULL;
}

/* -- companions ---------------------------------------------------------------------- */

/* CRC16-CCITT (XMODEM), Redis Cluster's key hash (binascii.crc_hqx with crc 0) */
static uint16_t CRC16_TABLE[256];

static void
crc16_init(void)
{
    for (int i = 0; i < 256; i++) {
        uint16_t crc = (uint16_t)(i << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
        CRC16_TABLE[i] = crc;
    }
}

static uint16_t
crc16(const char *data, Py_ssize_t length)
{
    uint16_t crc = 0;
    for (Py_ssize_t i = 0; i < length; i++)
        crc = (uint16_t)((crc << 8) ^ CRC16_TABLE[((crc >> 8) ^ (unsigned char)data[i]) & 0xff]);
    return crc;
}

static PyObject *
companions(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!arity("companions", nargs, 2))
        return NULL;
    PyObject *heads = args[0], *keys = args[1];
    if (!PyTuple_CheckExact(heads) || PyTuple_GET_SIZE(heads) != 16384) {
        PyErr_SetString(PyExc_TypeError, "companions: heads must be a tuple of 16384 str");
        return NULL;
    }
    if (!PyList_CheckExact(keys))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        Py_ssize_t length;
        const char *data = PyUnicode_CheckExact(key) ? PyUnicode_AsUTF8AndSize(key, &length) : NULL;
        if (data == NULL) {            /* bytes, or text UTF-8 cannot hold: Python decides */
            PyErr_Clear();
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        const char *open = memchr(data, '{', (size_t)length);
        if (open != NULL) {            /* the first {...} with content, as Redis hashes it */
            const char *close = memchr(open + 1, '}', (size_t)(data + length - open - 1));
            if (close != NULL && close > open + 1) {
                data = open + 1;
                length = close - open - 1;
            }
        }
        PyObject *name = PyUnicode_Concat(PyTuple_GET_ITEM(heads, crc16(data, length) % 16384), key);
        if (name == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, name);
    }
    return out;
}

/* -- invalidation_keys --------------------------------------------------------------- */

static PyObject *RESERVED_PREFIX;     /* "cachesync:" (schema/keys.py INTERNAL_PREFIX) */

/* the key text of a str or an int (not bool) column value, new reference; NULL without an
 * error set for any other type (canonical_text in Python decides) */
static PyObject *
simple_text(PyObject *v)
{
    if (PyUnicode_CheckExact(v))
        return Py_NewRef(v);
    if (PyLong_CheckExact(v))
        return PyObject_Str(v);
    return NULL;
}

static PyObject *
invalidation_keys(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!arity("invalidation_keys", nargs, 3))
        return NULL;
    PyObject *templates = args[0];
    if (!PyTuple_CheckExact(templates)) {
        PyErr_SetString(PyExc_TypeError, "invalidation_keys: templates must be a tuple");
        return NULL;
    }
    Py_ssize_t t = PyTuple_GET_SIZE(templates);
    PyObject *keys = PyList_New(0);
    if (keys == NULL)
        return NULL;
    long nulls = 0;
    for (int side = 1; side <= 2; side++) {
        PyObject *image = args[side];
        if (image == Py_None)
            continue;
        if (!PyDict_CheckExact(image))
            goto python;
        for (Py_ssize_t i = 0; i < t; i++) {
            PyObject *spec = PyTuple_GET_ITEM(templates, i);
            if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 3) {
                PyErr_SetString(PyExc_TypeError, "invalidation_keys: (head, field, tail) expected");
                goto fail;
            }
            PyObject *value = PyDict_GetItemWithError(image, PyTuple_GET_ITEM(spec, 1));
            if (value == NULL) {
                if (PyErr_Occurred())
                    goto fail;
                goto python;                 /* a missing column: Python raises */
            }
            if (value == Py_None) {
                nulls++;
                continue;
            }
            PyObject *text = simple_text(value);
            if (text == NULL) {
                if (PyErr_Occurred())
                    goto fail;
                goto python;
            }
            PyObject *head_text = PyUnicode_Concat(PyTuple_GET_ITEM(spec, 0), text);
            Py_DECREF(text);
            if (head_text == NULL)
                goto fail;
            PyObject *key = PyUnicode_Concat(head_text, PyTuple_GET_ITEM(spec, 2));
            Py_DECREF(head_text);
            if (key == NULL)
                goto fail;
            Py_ssize_t reserved = PyUnicode_Tailmatch(key, RESERVED_PREFIX, 0, PY_SSIZE_T_MAX, -1);
            if (reserved != 0) {
                Py_DECREF(key);
                if (reserved < 0)
                    goto fail;
                goto python;                 /* under the reserved prefix: Python raises */
            }
            int seen = 0;                    /* each key once, first seen first */
            for (Py_ssize_t j = 0; j < PyList_GET_SIZE(keys) && !seen; j++) {
                int eq = PyUnicode_Compare(PyList_GET_ITEM(keys, j), key) == 0;
                if (PyErr_Occurred()) {
                    Py_DECREF(key);
                    goto fail;
                }
                seen = eq;
            }
            int appended = seen ? 0 : PyList_Append(keys, key);
            Py_DECREF(key);
            if (appended < 0)
                goto fail;
        }
    }
    PyObject *out = PyList_AsTuple(keys);
    Py_DECREF(keys);
    if (out == NULL)
        return NULL;
    PyObject *result = Py_BuildValue("(Nl)", out, nulls);
    return result;
python:
    Py_DECREF(keys);
    Py_RETURN_NONE;
fail:
    Py_DECREF(keys);
    return NULL;
}

static PyMethodDef methods[] = {
    {"murmur2", murmur2, METH_O,
     "murmur2(data, /) -> int: Kafka's murmur2 of a bytes-like object's bytes (unsigned 32 bits)."},
    {"partition_for", (PyCFunction)(void (*)(void))partition_for, METH_FASTCALL,
     "partition_for(key, partitions, /) -> int: the partition Kafka's default partitioner "
     "gives a keyed record (partitions: 1..2147483647)."},
    {"event_from_doc", (PyCFunction)(void (*)(void))event_from_doc, METH_FASTCALL,
     "event_from_doc(doc, ChangeEvent, Source, /) -> ChangeEvent | None: the event of a parsed "
     "envelope of the plain shape, else None (the Python builder decides)."},
    {"companions", (PyCFunction)(void (*)(void))companions, METH_FASTCALL,
     "companions(heads, keys, /) -> list | None: heads[slot of key] + key for each str key of "
     "the list (heads: a tuple of 16384 str), None when one is not text UTF-8 can hold."},
    {"invalidation_keys", (PyCFunction)(void (*)(void))invalidation_keys, METH_FASTCALL,
     "invalidation_keys(templates, before, after, /) -> (keys, nulls) | None: the keys one-field "
     "templates ((head, field, tail), ...) render from the images, each once, and the NULL "
     "skips; None when a value is not str or int, a column is missing or a key is reserved."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "cachesync._speedups",
    "Compiled accelerators (optional; pure-Python fallbacks in schema/partition.py and "
    "schema/event.py).",
    0, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (intern_names() < 0)
        return NULL;
    crc16_init();
    if (RESERVED_PREFIX == NULL && (RESERVED_PREFIX = PyUnicode_InternFromString("cachesync:")) == NULL)
        return NULL;
    return PyModuleDef_Init(&module);
}
