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
#include <datetime.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <limits.h>

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

/* hash(the bytes of a bytes-like object), as an unsigned Python int */
static PyObject *
hash_of_buffer(PyObject *arg, uint32_t (*hash)(const unsigned char *, Py_ssize_t))
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t h = hash((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(h);
}

static PyObject *
murmur2(PyObject *module, PyObject *arg)
{
    (void)module;
    return hash_of_buffer(arg, murmur2_of);
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

/* CRC32 (zlib's crc32: reflected polynomial 0xEDB88320), the checksum a binlog event ends in
 * with binlog_checksum=CRC32 (producer_outbox/binlog/checksums.py); slice-by-8, so a 200-byte event
 * costs some 100 ns */
static uint32_t CRC32_TABLE[8][256];

static void
crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        CRC32_TABLE[0][i] = c;
    }
    for (int i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            CRC32_TABLE[t][i] = (CRC32_TABLE[t - 1][i] >> 8) ^ CRC32_TABLE[0][CRC32_TABLE[t - 1][i] & 0xff];
}

static uint32_t
crc32_of(const unsigned char *p, Py_ssize_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t a = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t b = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = CRC32_TABLE[7][a & 0xff] ^ CRC32_TABLE[6][(a >> 8) & 0xff] ^ CRC32_TABLE[5][(a >> 16) & 0xff]
            ^ CRC32_TABLE[4][a >> 24] ^ CRC32_TABLE[3][b & 0xff] ^ CRC32_TABLE[2][(b >> 8) & 0xff]
            ^ CRC32_TABLE[1][(b >> 16) & 0xff] ^ CRC32_TABLE[0][b >> 24];
    }
    while (n-- > 0)
        c = CRC32_TABLE[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static PyObject *
crc32(PyObject *module, PyObject *arg)
{
    (void)module;
    return hash_of_buffer(arg, crc32_of);
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

/* -- row_record ---------------------------------------------------------------------- */

/* The tailer's per-row work in one call (producer_outbox/encode/hotpath.py): from a decoded row,
 * trimmed here to the columns the mapping keeps, to its Kafka key, its record bytes and its message id, exactly as
 * rows.row_change + keys.kafka_key + event.encode + ids.binlog_message_id produce them.
 * Whatever it does not render exactly as Python does (a float Python writes with an
 * exponent, NaN or infinity, text UTF-8 cannot hold, a key column whose value another
 * type's text must come from and whose renderer raises, a row over the record limit,
 * a row index past the budget, a missing key column) makes it return None without an
 * error: the Python path then publishes that row, with its warnings and counters. */

#define ROW_INDEX_BITS 24                 /* schema/ids.py ROW_INDEX_BITS */
#define ENVELOPE_VERSION 1                /* schema/event.py ENVELOPE_VERSION */
#define MAX_DEPTH 64                      /* nested JSON values deeper than this: Python */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int
buf_reserve(Buf *b, Py_ssize_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int
buf_put(Buf *b, const char *s, Py_ssize_t n)
{
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

#define PUT_LIT(b, s) buf_put((b), (s), (Py_ssize_t)(sizeof(s) - 1))

/* what a writer returns: done, "Python decides" (no error set), or an error (set) */
enum { WR_DONE = 0, WR_PYTHON = 1, WR_ERROR = -1 };

/* a JSON string of UTF-8 text, escaped as json.dumps(ensure_ascii=False) and orjson do */
static int
put_json_text(Buf *b, const char *s, Py_ssize_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (buf_reserve(b, n + 2) < 0)
        return WR_ERROR;
    b->data[b->len++] = '"';
    Py_ssize_t run = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (buf_put(b, s + run, i - run) < 0)
            return WR_ERROR;
        run = i + 1;
        char esc[6] = {'\\', 0};
        Py_ssize_t len = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            esc[1] = 'u'; esc[2] = '0'; esc[3] = '0';
            esc[4] = hex[c >> 4]; esc[5] = hex[c & 15];
            len = 6;
        }
        if (buf_put(b, esc, len) < 0)
            return WR_ERROR;
    }
    if (buf_put(b, s + run, n - run) < 0 || PUT_LIT(b, "\"") < 0)
        return WR_ERROR;
    return WR_DONE;
}

static int
put_str(Buf *b, PyObject *s)
{
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(s, &n);
    if (text == NULL) {                 /* a lone surrogate: Python decides */
        PyErr_Clear();
        return WR_PYTHON;
    }
    return put_json_text(b, text, n);
}

/* an int's decimal text (json.dumps and orjson write the same digits) */
static int
put_int(Buf *b, PyObject *v)
{
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (!overflow) {
        if (x == -1 && PyErr_Occurred())
            return WR_ERROR;
        char text[24];
        int n = snprintf(text, sizeof text, "%lld", x);
        return buf_put(b, text, n) < 0 ? WR_ERROR : WR_DONE;
    }
    PyObject *s = PyObject_Str(v);
    if (s == NULL)
        return WR_ERROR;
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(s, &n);
    int r = text == NULL || buf_put(b, text, n) < 0 ? WR_ERROR : WR_DONE;
    Py_DECREF(s);
    return r;
}

/* a float as repr writes it, where orjson writes the same (no exponent, finite) */
static int
put_float(Buf *b, double x)
{
    if (!isfinite(x))
        return WR_PYTHON;
    char *text = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (text == NULL)
        return WR_ERROR;
    int r = strchr(text, 'e') != NULL ? WR_PYTHON : buf_put(b, text, (Py_ssize_t)strlen(text)) < 0
            ? WR_ERROR : WR_DONE;
    PyMem_Free(text);
    return r;
}

static int put_value(Buf *b, PyObject *v, PyObject *to_json, int depth);

/* a JSON value: the plain JSON types as they are; at the top of a column value (to_json
 * given), any other type as schema.values.to_json makes it JSON (once, its result plain) */
static int
put_value(Buf *b, PyObject *v, PyObject *to_json, int depth)
{
    if (depth > MAX_DEPTH)
        return WR_PYTHON;
    if (PyUnicode_CheckExact(v))
        return put_str(b, v);
    if (v == Py_None)
        return PUT_LIT(b, "null") < 0 ? WR_ERROR : WR_DONE;
    if (v == Py_True)
        return PUT_LIT(b, "true") < 0 ? WR_ERROR : WR_DONE;
    if (v == Py_False)
        return PUT_LIT(b, "false") < 0 ? WR_ERROR : WR_DONE;
    if (PyLong_CheckExact(v))
        return put_int(b, v);
    if (PyFloat_CheckExact(v))
        return put_float(b, PyFloat_AS_DOUBLE(v));
    if (PyDict_CheckExact(v)) {
        if (PUT_LIT(b, "{") < 0)
            return WR_ERROR;
        Py_ssize_t pos = 0;
        PyObject *k, *item;
        int first = 1, r;
        while (PyDict_Next(v, &pos, &k, &item)) {
            if (!PyUnicode_CheckExact(k))
                return WR_PYTHON;
            if ((!first && PUT_LIT(b, ",") < 0))
                return WR_ERROR;
            first = 0;
            if ((r = put_str(b, k)) != WR_DONE)
                return r;
            if (PUT_LIT(b, ":") < 0)
                return WR_ERROR;
            Py_INCREF(item);           /* to_json below may run Python code */
            r = put_value(b, item, NULL, depth + 1);
            Py_DECREF(item);
            if (r != WR_DONE)
                return r;
        }
        return PUT_LIT(b, "}") < 0 ? WR_ERROR : WR_DONE;
    }
    if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) {
        if (to_json != NULL && PyTuple_CheckExact(v))
            goto convert;              /* to_json lists a tuple's to_json'd items */
        PyObject *seq = PySequence_Fast(v, "");
        if (seq == NULL)
            return WR_ERROR;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        int r = PUT_LIT(b, "[") < 0 ? WR_ERROR : WR_DONE;
        for (Py_ssize_t i = 0; i < n && r == WR_DONE; i++) {
            if (i && PUT_LIT(b, ",") < 0)
                r = WR_ERROR;
            else
                r = put_value(b, PySequence_Fast_GET_ITEM(seq, i), NULL, depth + 1);
        }
        Py_DECREF(seq);
        if (r != WR_DONE)
            return r;
        return PUT_LIT(b, "]") < 0 ? WR_ERROR : WR_DONE;
    }
    if (to_json == NULL)
        return WR_PYTHON;
convert:;
    PyObject *plain = PyObject_CallOneArg(to_json, v);
    if (plain == NULL) {               /* TypeError and friends: Python raises them itself */
        PyErr_Clear();
        return WR_PYTHON;
    }
    int r = put_value(b, plain, NULL, depth + 1);
    Py_DECREF(plain);
    return r;
}

/* whether column ``name`` is kept (``keep``: a set of names, or None: every column);
 * -1 with an exception set */
static int
kept(PyObject *keep, PyObject *name)
{
    return keep == Py_None ? 1 : PySet_Contains(keep, name);
}

/* an image's JSON object, only the columns in ``keep`` (None: all), as rows.trim_image
 * leaves them; a dict's values that are not plain go through to_json */
static int
put_image(Buf *b, PyObject *image, PyObject *to_json, PyObject *keep)
{
    if (image == Py_None)
        return PUT_LIT(b, "null") < 0 ? WR_ERROR : WR_DONE;
    if (!PyDict_CheckExact(image))
        return WR_PYTHON;
    if (PUT_LIT(b, "{") < 0)
        return WR_ERROR;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    int first = 1, r;
    while (PyDict_Next(image, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k))
            return WR_PYTHON;
        int in = kept(keep, k);
        if (in < 0)
            return WR_ERROR;
        if (!in)
            continue;
        if (!first && PUT_LIT(b, ",") < 0)
            return WR_ERROR;
        first = 0;
        if ((r = put_str(b, k)) != WR_DONE)
            return r;
        if (PUT_LIT(b, ":") < 0)
            return WR_ERROR;
        Py_INCREF(v);
        r = put_value(b, v, to_json, 0);
        Py_DECREF(v);
        if (r != WR_DONE)
            return r;
    }
    return PUT_LIT(b, "}") < 0 ? WR_ERROR : WR_DONE;
}

/* one primary-key value's key text, escaped as schema/keys.py pk_text escapes it */
static int
put_key_text(Buf *b, PyObject *v, PyObject *canonical_text)
{
    if (v == Py_None)
        return PUT_LIT(b, "\\N") < 0 ? WR_ERROR : WR_DONE;
    PyObject *text;
    if (PyUnicode_CheckExact(v))
        text = Py_NewRef(v);
    else if (PyLong_CheckExact(v))
        text = PyObject_Str(v);
    else {
        text = PyObject_CallOneArg(canonical_text, v);
        if (text == NULL || !PyUnicode_CheckExact(text)) {   /* Python raises it, or decides */
            PyErr_Clear();
            Py_XDECREF(text);
            return WR_PYTHON;
        }
    }
    if (text == NULL)
        return WR_ERROR;
    Py_ssize_t n = 0;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    int r = WR_DONE;
    if (s == NULL) {
        PyErr_Clear();
        r = WR_PYTHON;
    }
    for (Py_ssize_t i = 0; i < n && r == WR_DONE; i++) {
        if (s[i] == '\\' || s[i] == ',')
            r = PUT_LIT(b, "\\") < 0 ? WR_ERROR : WR_DONE;
        if (r == WR_DONE && buf_reserve(b, 1) < 0)
            r = WR_ERROR;
        if (r == WR_DONE)
            b->data[b->len++] = s[i];
    }
    Py_DECREF(text);
    return r;
}

/* BLAKE2b (RFC 7693) with a 16-byte digest and no key: hashlib.blake2b(m, digest_size=16) */
static const uint64_t B2B_IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};
static const uint8_t B2B_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

#define ROTR64(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
#define B2B_G(a, b, c, d, x, y)                     \
    do {                                            \
        v[a] = v[a] + v[b] + (x);                   \
        v[d] = ROTR64(v[d] ^ v[a], 32);             \
        v[c] = v[c] + v[d];                         \
        v[b] = ROTR64(v[b] ^ v[c], 24);             \
        v[a] = v[a] + v[b] + (y);                   \
        v[d] = ROTR64(v[d] ^ v[a], 16);             \
        v[c] = v[c] + v[d];                         \
        v[b] = ROTR64(v[b] ^ v[c], 63);             \
    } while (0)

static void
b2b_compress(uint64_t h[8], const unsigned char block[128], uint64_t counter, int last)
{
    uint64_t v[16], m[16];
    for (int i = 0; i < 16; i++) {
        uint64_t w = 0;
        for (int j = 7; j >= 0; j--)
            w = w << 8 | block[8 * i + j];
        m[i] = w;
    }
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = B2B_IV[i];
    }
    v[12] ^= counter;                  /* messages here are far below 2**64 bytes */
    if (last)
        v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = B2B_SIGMA[r];
        B2B_G(0, 4, 8, 12, m[s[0]], m[s[1]]);
        B2B_G(1, 5, 9, 13, m[s[2]], m[s[3]]);
        B2B_G(2, 6, 10, 14, m[s[4]], m[s[5]]);
        B2B_G(3, 7, 11, 15, m[s[6]], m[s[7]]);
        B2B_G(0, 5, 10, 15, m[s[8]], m[s[9]]);
        B2B_G(1, 6, 11, 12, m[s[10]], m[s[11]]);
        B2B_G(2, 7, 8, 13, m[s[12]], m[s[13]]);
        B2B_G(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++)
        h[i] ^= v[i] ^ v[i + 8];
}

/* the 32 hex digits of blake2b(data, digest_size=16) */
static void
blake2b_16_hex(const unsigned char *data, Py_ssize_t n, char out[32])
{
    static const char hex[] = "0123456789abcdef";
    uint64_t h[8];
    memcpy(h, B2B_IV, sizeof h);
    h[0] ^= 0x01010000ULL ^ 16;        /* fanout 1, depth 1, no key, 16-byte digest */
    unsigned char block[128];
    uint64_t done = 0;
    while (n - (Py_ssize_t)done > 128) {
        b2b_compress(h, data + done, done + 128, 0);
        done += 128;
    }
    Py_ssize_t rest = n - (Py_ssize_t)done;
    memset(block, 0, sizeof block);
    memcpy(block, data + done, (size_t)rest);
    b2b_compress(h, block, (uint64_t)n, 1);
    for (int i = 0; i < 16; i++) {
        unsigned char byte = (unsigned char)(h[i / 8] >> (8 * (i % 8)));
        out[2 * i] = hex[byte >> 4];
        out[2 * i + 1] = hex[byte & 15];
    }
}

static PyObject *
blake2b_16(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    char hex[32];
    blake2b_16_hex((const unsigned char *)view.buf, view.len, hex);
    PyBuffer_Release(&view);
    return PyUnicode_FromStringAndSize(hex, 32);
}

/* the primary-key columns as rows.pk_columns names them: "" / None -> every column of the
 * image, a str -> itself, a tuple of str -> itself; NULL without an error set otherwise */
static PyObject *
pk_names(PyObject *primary_key, PyObject *image)
{
    if (primary_key == Py_None || (PyUnicode_CheckExact(primary_key)
                                   && PyUnicode_GET_LENGTH(primary_key) == 0)
            || (PyTuple_CheckExact(primary_key) && PyTuple_GET_SIZE(primary_key) == 0))
        return PyDict_Keys(image);
    if (PyUnicode_CheckExact(primary_key))
        return PyTuple_Pack(1, primary_key);
    if (!PyTuple_CheckExact(primary_key))
        return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(primary_key); i++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(primary_key, i)))
            return NULL;
    return Py_NewRef(primary_key);
}

/* key text (into key) and the JSON "pk" array (into doc) of the row's primary key */
static int
put_pk(Buf *key, Buf *doc, PyObject *names, PyObject *image, PyObject *to_json,
       PyObject *canonical_text, PyObject *keep)
{
    PyObject *seq = PySequence_Fast(names, "");
    if (seq == NULL)
        return WR_ERROR;
    int r = PUT_LIT(doc, "[") < 0 ? WR_ERROR : WR_DONE;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && r == WR_DONE; i++) {
        PyObject *name = PySequence_Fast_GET_ITEM(seq, i);
        int in = kept(keep, name);
        if (in <= 0) {              /* trimmed away: Python's trimmed image lacks it */
            r = in < 0 ? WR_ERROR : WR_PYTHON;
            break;
        }
        PyObject *v = PyDict_GetItemWithError(image, name);
        if (v == NULL) {
            r = PyErr_Occurred() ? WR_ERROR : WR_PYTHON;    /* not in the image: Python raises */
            break;
        }
        Py_INCREF(v);
        if ((i && (PUT_LIT(doc, ",") < 0 || PUT_LIT(key, ",") < 0)) || PUT_LIT(doc, "[") < 0)
            r = WR_ERROR;
        if (r == WR_DONE)
            r = put_str(doc, name);
        if (r == WR_DONE)
            r = PUT_LIT(doc, ",") < 0 ? WR_ERROR : WR_DONE;
        if (r == WR_DONE)
            r = put_value(doc, v, to_json, 0);
        if (r == WR_DONE)
            r = PUT_LIT(doc, "]") < 0 ? WR_ERROR : WR_DONE;
        if (r == WR_DONE)
            r = put_key_text(key, v, canonical_text);
        Py_DECREF(v);
    }
    Py_DECREF(seq);
    if (r == WR_DONE && PUT_LIT(doc, "]") < 0)
        r = WR_ERROR;
    return r;
}

static int
put_utf8(Buf *b, PyObject *s)          /* raw UTF-8 of a str (key text, id material) */
{
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(s, &n);
    if (text == NULL) {
        PyErr_Clear();
        return WR_PYTHON;
    }
    return buf_put(b, text, n) < 0 ? WR_ERROR : WR_DONE;
}

enum {
    A_SCOPE, A_SERVER, A_POSITION, A_COMMIT_TS, A_ORDINAL, A_ROW_INDEX, A_KIND, A_DB, A_TABLE,
    A_OP, A_PRIMARY_KEY, A_BEFORE, A_AFTER, A_MAX_BYTES, A_TO_JSON, A_CANONICAL_TEXT, A_KEEP,
    A_COUNT
};

/* the record of one row, written into the three buffers; WR_PYTHON: Python decides */
static int
write_row(PyObject *const *a, long long row_index, Buf *key, Buf *doc, Buf *id)
{
    PyObject *image = a[A_AFTER] != Py_None ? a[A_AFTER] : a[A_BEFORE];
    if (!PyDict_CheckExact(image))
        return WR_PYTHON;
    if (put_utf8(id, a[A_SCOPE]) || PUT_LIT(id, "|") < 0 || put_utf8(id, a[A_POSITION])
        || PUT_LIT(id, "|") < 0 || put_int(id, a[A_ROW_INDEX]))
        return PyErr_Occurred() ? WR_ERROR : WR_PYTHON;
    char hex[32];
    blake2b_16_hex((const unsigned char *)id->data, id->len, hex);
    int r;
    if (PUT_LIT(doc, "{\"v\":1,\"id\":\"") < 0 || buf_put(doc, hex, 32) < 0
        || PUT_LIT(doc, "\",\"src\":[") < 0)
        return WR_ERROR;
    if ((r = put_str(doc, a[A_KIND])) || PUT_LIT(doc, ",") < 0
        || (r = put_str(doc, a[A_SERVER])) || PUT_LIT(doc, ",") < 0
        || (r = put_str(doc, a[A_POSITION])) || PUT_LIT(doc, ",") < 0
        || (r = put_float(doc, PyFloat_AS_DOUBLE(a[A_COMMIT_TS]))) || PUT_LIT(doc, ",") < 0
        || (r = put_int(doc, a[A_ROW_INDEX])) || PUT_LIT(doc, "],\"db\":") < 0
        || (r = put_str(doc, a[A_DB])) || PUT_LIT(doc, ",\"tbl\":") < 0
        || (r = put_str(doc, a[A_TABLE])) || PUT_LIT(doc, ",\"op\":") < 0
        || (r = put_str(doc, a[A_OP])) || PUT_LIT(doc, ",\"pk\":") < 0)
        return r ? r : WR_ERROR;
    if ((r = put_utf8(key, a[A_DB])) || PUT_LIT(key, ".") < 0
        || (r = put_utf8(key, a[A_TABLE])) || PUT_LIT(key, ":") < 0)
        return r ? r : WR_ERROR;
    PyObject *keep = a[A_KEEP];
    if (keep != Py_None && !PyFrozenSet_CheckExact(keep) && !PySet_CheckExact(keep))
        return WR_PYTHON;
    PyObject *names = pk_names(a[A_PRIMARY_KEY], image);
    if (names == NULL)
        return PyErr_Occurred() ? WR_ERROR : WR_PYTHON;
    if (keep != Py_None && PyList_CheckExact(names)) {   /* no primary key: the trimmed image */
        Py_DECREF(names);
        return WR_PYTHON;
    }
    r = put_pk(key, doc, names, image, a[A_TO_JSON], a[A_CANONICAL_TEXT], keep);
    Py_DECREF(names);
    if (r || PUT_LIT(doc, ",\"b\":") < 0
        || (r = put_image(doc, a[A_BEFORE], a[A_TO_JSON], keep))
        || PUT_LIT(doc, ",\"a\":") < 0
        || (r = put_image(doc, a[A_AFTER], a[A_TO_JSON], keep))
        || PUT_LIT(doc, ",\"ver\":") < 0)
        return r ? r : WR_ERROR;
    /* the version: the transaction's ordinal, then the row index (schema/ids binlog_version) */
    PyObject *bits = PyLong_FromLong(ROW_INDEX_BITS);
    PyObject *shifted = bits ? PyNumber_Lshift(a[A_ORDINAL], bits) : NULL;
    PyObject *version = shifted ? PyNumber_Or(shifted, a[A_ROW_INDEX]) : NULL;
    Py_XDECREF(bits);
    Py_XDECREF(shifted);
    if (version == NULL)
        return WR_ERROR;
    r = put_int(doc, version);
    Py_DECREF(version);
    if (r || PUT_LIT(doc, "}") < 0)
        return r ? r : WR_ERROR;
    return WR_DONE;
}

static PyObject *
row_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!arity("row_record", nargs, A_COUNT))
        return NULL;
    static const int strs[] = {A_SCOPE, A_SERVER, A_POSITION, A_KIND, A_DB, A_TABLE, A_OP};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
        if (!PyUnicode_CheckExact(args[strs[i]]))
            Py_RETURN_NONE;
    if (!PyFloat_CheckExact(args[A_COMMIT_TS]) || !PyLong_CheckExact(args[A_ORDINAL])
        || !PyLong_CheckExact(args[A_ROW_INDEX]) || !PyLong_CheckExact(args[A_MAX_BYTES])
        || (args[A_BEFORE] == Py_None && args[A_AFTER] == Py_None))
        Py_RETURN_NONE;
    long long row_index = PyLong_AsLongLong(args[A_ROW_INDEX]);
    if (row_index == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    int overflow;
    long long ordinal = PyLong_AsLongLongAndOverflow(args[A_ORDINAL], &overflow);
    if (ordinal == -1 && PyErr_Occurred())
        return NULL;
    if (row_index < 0 || row_index >= (1LL << ROW_INDEX_BITS) || overflow < 0
        || (!overflow && ordinal < 0))
        Py_RETURN_NONE;                 /* past the row budget: Python raises and reports */
    Buf key = {0}, doc = {0}, id = {0};
    PyObject *out = NULL;
    int r = write_row(args, row_index, &key, &doc, &id);
    if (r == WR_DONE) {
        int over = 0;             /* a limit past long long: no record is over it */
        long long max_bytes = PyLong_AsLongLongAndOverflow(args[A_MAX_BYTES], &over);
        if (max_bytes == -1 && PyErr_Occurred())
            r = WR_ERROR;
        else if (over < 0 || (over == 0 && doc.len > max_bytes))
            r = WR_PYTHON;               /* over the record limit: Python's invalidate-only form */
    }
    if (r == WR_DONE) {
        PyObject *k = PyUnicode_DecodeUTF8(key.data, key.len, "strict");
        PyObject *v = k ? PyBytes_FromStringAndSize(doc.data, doc.len) : NULL;
        PyObject *i = v ? PyUnicode_FromStringAndSize(doc.data + 13, 32) : NULL;
        if (i != NULL)
            out = PyTuple_Pack(3, k, v, i);
        Py_XDECREF(k);
        Py_XDECREF(v);
        Py_XDECREF(i);
    }
    PyMem_Free(key.data);
    PyMem_Free(doc.data);
    PyMem_Free(id.data);
    if (r == WR_PYTHON)
        Py_RETURN_NONE;
    return out;
}

/* ---- scan_group: one whole binlog event group from the dump stream's buffer --------------
 *
 * The fast reader (producer_outbox/binlog/dumpstream.py) calls this with its read buffer: when the
 * bytes from ``pos`` hold, in complete packets with the expected sequence numbers, one
 * MariaDB event group of the common shape -- a GTID event (not standalone, not XA), then
 * annotate-rows, table-map and v1/v2 write/update/delete rows events, then an XID event --
 * it returns where each event's payload lies, so Python frames a transaction with one call
 * instead of one Python turn per event. Anything else (another event type, a packet cut by
 * the buffer's end, a continued or error packet, a wrong sequence number) returns None and
 * the reader takes its event-by-event path, which is exactly what ran before. */

#define SG_OK_BYTE 0
#define SG_BODY 20                   /* OK byte + 19-byte event header */
#define SG_MAX_EVENTS 4096
#define SG_MAX_PACKET 0xFFFFFF
#define SG_XID 16
#define SG_TABLE_MAP 19
#define SG_ANNOTATE 160
#define SG_MARIADB_GTID 162
/* MariaDB GTID flags: FL_STANDALONE (no XID ends the group), FL_PREPARED_XA, FL_COMPLETED_XA */
#define SG_GTID_REFUSED (1 | 64 | 128)

static int
sg_member(unsigned t)
{
    return t == SG_TABLE_MAP || t == SG_ANNOTATE || (t >= 23 && t <= 25) || (t >= 30 && t <= 32);
}

static uint32_t
sg_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* the packets of one common-shape group from buf[pos]: its frames' payload bounds in starts/
 * ends (n of them), the position and sequence number after it; 0 when the buffer does not hold
 * one (nothing consumed), or, with ``checksum`` (events end in a CRC32), when an event of it
 * fails its checksum */
static int
sg_scan(const unsigned char *buf, Py_ssize_t size, Py_ssize_t pos, long seq, int checksum,
        Py_ssize_t *starts, Py_ssize_t *ends, int *count, Py_ssize_t *end, long *next_seq)
{
    int n = 0;
    for (;;) {
        if (pos < 0 || size - pos < 4 || n == SG_MAX_EVENTS)
            return 0;
        Py_ssize_t length = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16;
        if (buf[pos + 3] != (unsigned char)(seq & 0xFF) || length >= SG_MAX_PACKET
                || length < SG_BODY || size - pos - 4 < length)
            return 0;
        const unsigned char *raw = buf + pos + 4;
        unsigned type = raw[5];
        if (raw[0] != SG_OK_BYTE)
            return 0;
        /* an event whose CRC32 fails is left to the per-event path, which names the error */
        if (checksum && (length < SG_BODY + 4
                         || crc32_of(raw + 1, length - 5) != sg_u32(raw + length - 4)))
            return 0;
        if (n == 0) {
            if (type != SG_MARIADB_GTID || length < SG_BODY + 13 || raw[SG_BODY + 12] & SG_GTID_REFUSED)
                return 0;
        } else if (type != SG_XID && !sg_member(type)) {
            return 0;
        }
        starts[n] = pos + 4;
        ends[n] = pos + 4 + length;
        n++;
        pos += 4 + length;
        seq = (seq + 1) % 256;
        if (type == SG_XID) {
            if (length < SG_BODY + 8)
                return 0;
            *count = n;
            *end = pos;
            *next_seq = seq;
            return 1;
        }
    }
}

static PyObject *
scan_group(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "scan_group(buf: bytes, pos: int, seq: int, checksum: bool)");
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long seq = PyLong_AsLong(args[2]);
    if ((pos == -1 || seq == -1) && PyErr_Occurred())
        return NULL;
    int checksum = PyObject_IsTrue(args[3]);
    if (checksum < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t starts[SG_MAX_EVENTS], ends[SG_MAX_EVENTS];
    int n;
    if (!sg_scan(buf, size, pos, seq, checksum, starts, ends, &n, &pos, &seq))
        Py_RETURN_NONE;
    PyObject *frames = PyTuple_New(n);
    if (frames == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        const unsigned char *raw = buf + starts[i];
        /* (type, timestamp, server id, next position, flags, payload start, payload end) */
        PyObject *frame = Py_BuildValue("(BkkkHnn)", raw[5], (unsigned long)sg_u32(raw + 1),
                                        (unsigned long)sg_u32(raw + 6), (unsigned long)sg_u32(raw + 14),
                                        (unsigned short)(raw[18] | raw[19] << 8), starts[i], ends[i]);
        if (frame == NULL) {
            Py_DECREF(frames);
            return NULL;
        }
        PyTuple_SET_ITEM(frames, i, frame);
    }
    return Py_BuildValue("(nlN)", pos, seq, frames);
}

/* ---- plain_run: buffered transactions of the common shape straight to their records -------
 *
 * The binlog source (producer_outbox/binlog_source.py, compiled_run) calls this with the fast
 * reader's read buffer: for each whole transaction of the common shape there (sg_scan) whose
 * every table map has a plan, it reads the GTID, decodes the rows of the mapped tables from
 * their bytes and writes each row's record as row_record does, so that Python makes no
 * object per event and no call per row. A plan (compile_plan, made by Python from the
 * RowEncoder's decisions for one table map) says, per column, how to step over its value
 * and, for the columns the mapping keeps, how to decode it: exactly the values the generated
 * Python decoder (fastrows) gives, and wherever that decoder gives up (a fraction or a
 * decimal group out of range, an ENUM index past its values, text its codec rejects) this
 * stops too. It stops before the first transaction it cannot take whole -- another shape, a
 * table map without a plan, a partial row image, a row the row writer hands to Python, a
 * GTID that does not advance its domain, an event whose CRC32 fails (sg_scan) -- and returns
 * what it took: the reader then frames
 * that transaction as before, and the Python path decides. */

#define PR_MAX_MAPS 64                /* table maps in one transaction (more: Python) */
#define PR_MAX_DOMAINS 16             /* GTID domains in one run (more: Python) */

/* the column kinds of a plan: producer_outbox/decode/rowdecode.py's Kind, which says what a and b are */
enum { PC_INT = 1, PC_REAL, PC_YEAR, PC_STRING, PC_DATE, PC_ENUM, PC_DATETIME2,
       PC_TIMESTAMP2, PC_TIME2, PC_DECIMAL, PC_SET, PC_BIT };

typedef struct {
    int type, a, b;       /* see compile_plan */
    Py_ssize_t width;     /* the value's bytes (PC_STRING: its length's), plan_column_width */
    PyObject *name;       /* kept: the image's key; NULL: stepped over, checked only */
    PyObject *codec;      /* PC_STRING: the Python codec (str), or NULL: the bytes */
    const char *codec_text;
    PyObject *values;     /* PC_ENUM, PC_SET: the tuple of the column's values, else NULL */
} PlanColumn;

typedef struct {
    PyObject *db, *table, *kind, *primary_key;
    Py_ssize_t ncols;
    PlanColumn cols[1];   /* ncols of them */
} Plan;

static const int FSP_BYTES[7] = {0, 1, 1, 2, 2, 3, 3};
static const int DIG2BYTES[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};
static const uint32_t POW10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000,
                                   100000000, 1000000000};
static PyObject *OP_TEXT[3];          /* "insert", "update", "delete" */
static PyObject *EMPTY_TEXT;          /* "" */

static void
plan_free(PyObject *capsule)
{
    Plan *plan = PyCapsule_GetPointer(capsule, "cachesync.plan");
    if (plan == NULL)
        return;
    Py_XDECREF(plan->db);
    Py_XDECREF(plan->table);
    Py_XDECREF(plan->kind);
    Py_XDECREF(plan->primary_key);
    for (Py_ssize_t i = 0; i < plan->ncols; i++) {
        Py_XDECREF(plan->cols[i].name);
        Py_XDECREF(plan->cols[i].codec);
        Py_XDECREF(plan->cols[i].values);
    }
    PyMem_Free(plan);
}

static int
decimal_width(int precision, int decimals)
{
    int whole = precision - decimals;
    return (whole / 9) * 4 + DIG2BYTES[whole % 9] + (decimals / 9) * 4 + DIG2BYTES[decimals % 9];
}

static PyObject *DECIMAL_TYPE;        /* decimal.Decimal, imported with the first DECIMAL plan */

static PyObject *
decimal_type(void)
{
    if (DECIMAL_TYPE == NULL) {
        PyObject *module = PyImport_ImportModule("decimal");
        if (module != NULL) {
            DECIMAL_TYPE = PyObject_GetAttrString(module, "Decimal");
            Py_DECREF(module);
        }
    }
    return DECIMAL_TYPE;
}

/* the bytes of a value of this spec (PC_STRING: of its length), or -1 where the compiled
 * implementation does not read such a column (a kind or parameters out of its range); with
 * read_value below, the C place of a column kind */
static Py_ssize_t
plan_column_width(const PlanColumn *c)
{
    int a = c->a, fsp = a >= 0 && a <= 6;
    switch (c->type) {
    case PC_INT: return a == 1 || a == 2 || a == 3 || a == 4 || a == 8 ? a : -1;
    case PC_REAL: return a == 4 || a == 8 ? a : -1;
    case PC_YEAR: return 1;
    case PC_DATE: return a == 3 ? 3 : -1;
    case PC_STRING: case PC_ENUM: case PC_SET: case PC_BIT:
        if (a < 1 || a > 8 || ((c->type == PC_ENUM || c->type == PC_SET) && c->values == NULL)
                || (c->type == PC_BIT && (c->b < 1 || c->b > 8 * a)))
            return -1;
        return a;
    case PC_DATETIME2: return fsp ? 5 + FSP_BYTES[a] : -1;
    case PC_TIMESTAMP2: return fsp ? 4 + FSP_BYTES[a] : -1;
    case PC_TIME2: return fsp ? 3 + FSP_BYTES[a] : -1;
    case PC_DECIMAL:
        if (a <= 0 || a > 65 || c->b < 0 || c->b > a || decimal_type() == NULL)
            return -1;
        return decimal_width(a, c->b);
    default: return -1;
    }
}

/* compile_plan(db, table, kind, primary_key, columns) -> capsule; columns: a tuple of
 * (kind, a, b, name or None, codec or None, values or None) per column of the table, in
 * order, as producer_outbox/decode/rowdecode.py's compiled_columns makes it from the column plan.
 * A column is named when the mapping keeps it (decoded), else stepped over (checked only).
 * ValueError for a spec it does not know (plan_column_width). */
static PyObject *
compile_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!arity("compile_plan", nargs, 5))
        return NULL;
    PyObject *columns = args[4];
    if (!PyUnicode_CheckExact(args[0]) || !PyUnicode_CheckExact(args[1])
            || !PyUnicode_CheckExact(args[2]) || !PyTuple_CheckExact(columns)) {
        PyErr_SetString(PyExc_TypeError, "compile_plan(db: str, table: str, kind: str, primary_key, columns: tuple)");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(columns);
    Plan *plan = PyMem_Calloc(1, sizeof(Plan) + (size_t)(n > 0 ? n - 1 : 0) * sizeof(PlanColumn));
    if (plan == NULL)
        return PyErr_NoMemory();
    PyObject *capsule = PyCapsule_New(plan, "cachesync.plan", plan_free);
    if (capsule == NULL) {
        PyMem_Free(plan);
        return NULL;
    }
    plan->db = Py_NewRef(args[0]);
    plan->table = Py_NewRef(args[1]);
    plan->kind = Py_NewRef(args[2]);
    plan->primary_key = Py_NewRef(args[3]);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *spec = PyTuple_GET_ITEM(columns, i);
        PlanColumn *c = &plan->cols[i];
        PyObject *name, *codec, *values = Py_None;
        if (!PyTuple_CheckExact(spec)
                || !PyArg_ParseTuple(spec, "iiiOO|O", &c->type, &c->a, &c->b, &name, &codec, &values))
            goto bad;
        plan->ncols = i + 1;
        if (name != Py_None) {
            if (!PyUnicode_CheckExact(name))
                goto bad;
            c->name = Py_NewRef(name);
        }
        if (codec != Py_None) {
            if (!PyUnicode_CheckExact(codec) || c->type != PC_STRING)
                goto bad;
            c->codec = Py_NewRef(codec);
            if ((c->codec_text = PyUnicode_AsUTF8(codec)) == NULL)
                goto fail;
        }
        if (values != Py_None) {
            if (!PyTuple_CheckExact(values) || PyTuple_GET_SIZE(values) != c->b
                    || (c->type != PC_ENUM && c->type != PC_SET))
                goto bad;
            c->values = Py_NewRef(values);
        }
        if ((c->width = plan_column_width(c)) < 0) {
            if (PyErr_Occurred())
                goto fail;
            goto bad;
        }
    }
    plan->ncols = n;
    return capsule;
bad:
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "compile_plan: column spec %zd is not one it knows", plan->ncols);
fail:
    Py_DECREF(capsule);
    return NULL;
}

/* what reading a value gives: its object, "Python decides" (stop), or an error */
enum { RD_OK = 0, RD_STOP = 1, RD_ERROR = -1 };

static uint64_t
le_uint(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t
be_uint(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* a fraction's microseconds as fastrows._fraction computes them from its stored value */
static long long
fraction_micro(int fsp, long long value)
{
    if (fsp % 2)
        value = value / 10;           /* int(value / 10): truncates toward zero */
    static const long long scale[7] = {1, 100000, 10000, 1000, 100, 10, 1};
    return value * scale[fsp];
}

/* a date (fsp < 0) or datetime Python cannot hold ('0000-00-00', a zero month or day) as the
 * server's text, as keycolumns.zero_date_text and zero_datetime_text write it, once the
 * constructor's ValueError is cleared; parts: year, month, day, hour, minute, second, micro */
static PyObject *
server_text(const int parts[7], int fsp)
{
    if (!PyErr_ExceptionMatches(PyExc_ValueError))
        return NULL;
    PyErr_Clear();
    char text[48];
    int n = snprintf(text, sizeof text, "%04d-%02d-%02d", parts[0], parts[1], parts[2]);
    if (fsp >= 0)
        n += snprintf(text + n, sizeof text - (size_t)n, " %02d:%02d:%02d.%06d", parts[3],
                      parts[4], parts[5], parts[6]) - (fsp ? 6 - fsp : 7);
    return PyUnicode_FromStringAndSize(text, n);
}

/* the SET column's members whose bit is set, or None ("empty set") when none is */
static PyObject *
set_members(const PlanColumn *c, uint64_t mask)
{
    PyObject *set = PySet_New(NULL);
    if (set == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < c->b && i < 64; i++)
        if (mask >> i & 1 && PySet_Add(set, PyTuple_GET_ITEM(c->values, i)) < 0) {
            Py_DECREF(set);
            return NULL;
        }
    if (PySet_GET_SIZE(set) == 0) {
        Py_DECREF(set);
        return Py_NewRef(Py_None);
    }
    return set;
}

/* a BIT(bits) value as '0'/'1' text, most significant first */
static PyObject *
bit_text(uint64_t value, int bits)
{
    char text[64];
    for (int i = 0; i < bits; i++)
        text[i] = (char)('0' + (value >> (bits - 1 - i) & 1));
    return PyUnicode_FromStringAndSize(text, bits);
}

/* datetime.utcfromtimestamp(seconds) plus micro microseconds (a naive datetime) */
static PyObject *
utc_datetime(int32_t seconds, int micro)
{
    long long days = seconds >= 0 ? seconds / 86400 : -((-(long long)seconds + 86399) / 86400);
    long long rest = (long long)seconds - days * 86400;
    /* the civil date of a day count from 1970-01-01 (H. Hinnant's days_from_civil, inverted) */
    long long z = days + 719468;
    long long era = (z >= 0 ? z : z - 146096) / 146097;
    long long doe = z - era * 146097;
    long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    long long mp = (5 * doy + 2) / 153;
    int day = (int)(doy - (153 * mp + 2) / 5 + 1);
    int month = (int)(mp < 10 ? mp + 3 : mp - 9);
    int year = (int)(yoe + era * 400 + (month <= 2));
    return PyDateTime_FromDateAndTime(year, month, day, (int)(rest / 3600), (int)(rest / 60 % 60),
                                      (int)(rest % 60), micro);
}

/* a TIME2 value from its 3-byte integer part and fraction (fb bytes), as
 * keycolumns.time2_delta reads it (-00:00:00.000001 included) */
static PyObject *
time2_delta(long long int_raw, long long frac, int fb)
{
    static const long long FRAC_SCALE[4] = {0, 10000, 100, 1};
    long long intpart = int_raw - 0x800000;
    if ((fb == 1 || fb == 2) && intpart < 0 && frac) {
        intpart += 1;
        frac -= 1LL << (8 * fb);
    }
    long long packed = intpart * (1LL << 24) + frac * FRAC_SCALE[fb];
    long long tmp = packed < 0 ? -packed : packed, hms = tmp >> 24;
    long long us = ((hms >> 12 & 1023) * 3600 + (hms >> 6 & 63) * 60 + (hms & 63)) * 1000000LL
                   + (tmp & 0xFFFFFF);
    if (packed < 0)
        us = -us;
    const long long DAY = 86400LL * 1000000LL;
    long long days = us >= 0 ? us / DAY : -((-us + DAY - 1) / DAY);
    long long rest = us - days * DAY;
    return PyDelta_FromDSU((int)days, (int)(rest / 1000000), (int)(rest % 1000000));
}

/* one column's value at p[*pos] (end: where the rows end): *out set (new reference) when
 * the column is kept; a value Python's decoder would not give returns RD_STOP */
static int
read_value(const PlanColumn *c, const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
           PyObject **out)
{
    Py_ssize_t at = *pos, left = end - at;
    const unsigned char *v = p + at;
    Py_ssize_t width = c->width;
    *out = NULL;
    if (left < width)
        return RD_STOP;
    switch (c->type) {
    case PC_INT:
        if (c->name != NULL) {
            uint64_t u = le_uint(v, c->a);
            if (c->b)
                *out = PyLong_FromUnsignedLongLong(u);
            else {
                int bits = 8 * c->a;
                int64_t s = bits == 64 ? (int64_t)u : (int64_t)(u ^ (1ULL << (bits - 1))) - (int64_t)(1LL << (bits - 1));
                *out = PyLong_FromLongLong(s);
            }
        }
        break;
    case PC_REAL:
        if (c->name != NULL) {
            uint64_t u = le_uint(v, c->a);       /* IEEE, little-endian in the binlog */
            if (c->a == 4) {
                uint32_t u32 = (uint32_t)u;
                float f;
                memcpy(&f, &u32, 4);
                *out = PyFloat_FromDouble((double)f);
            } else {
                double d;
                memcpy(&d, &u, 8);
                *out = PyFloat_FromDouble(d);
            }
        }
        break;
    case PC_YEAR:
        if (c->name != NULL)
            *out = PyLong_FromLong(v[0] + 1900L);
        break;
    case PC_STRING: {
        uint64_t n = le_uint(v, c->a);
        if ((uint64_t)(left - c->a) < n)
            return RD_STOP;
        width += (Py_ssize_t)n;
        const char *text = (const char *)v + c->a;
        if (c->codec != NULL) {       /* checked even when not kept: the decoder decodes it */
            PyObject *s = PyUnicode_Decode(text, (Py_ssize_t)n, c->codec_text, "strict");
            if (s == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    return RD_ERROR;
                PyErr_Clear();
                return RD_STOP;
            }
            if (c->name != NULL)
                *out = s;
            else
                Py_DECREF(s);
        } else if (c->name != NULL) {
            *out = n ? PyBytes_FromStringAndSize(text, (Py_ssize_t)n) : Py_NewRef(EMPTY_TEXT);
        }
        break;
    }
    case PC_DATE:
        if (c->name != NULL) {
            uint32_t t = (uint32_t)le_uint(v, 3);
            int parts[7] = {(int)(t >> 9 & 0x7FFF), (int)(t >> 5 & 15), (int)(t & 31)};
            *out = PyDate_FromDate(parts[0], parts[1], parts[2]);
            if (*out == NULL)
                *out = server_text(parts, -1);
        }
        break;
    case PC_ENUM: {
        uint64_t index = le_uint(v, c->a);
        if (index >= (uint64_t)c->b)
            return RD_STOP;           /* the decoder's IndexError */
        if (c->name != NULL)
            *out = Py_NewRef(PyTuple_GET_ITEM(c->values, (Py_ssize_t)index));
        break;
    }
    case PC_SET:
        if (c->name != NULL)
            *out = set_members(c, le_uint(v, c->a));
        break;
    case PC_BIT:
        if (c->name != NULL)
            *out = bit_text(be_uint(v, c->a), c->b);
        break;
    case PC_DATETIME2: {
        int fb = FSP_BYTES[c->a];
        long long micro = c->a ? fraction_micro(c->a, (long long)be_uint(v + 5, fb)) : 0;
        if (micro > 999999)
            return RD_STOP;
        if (c->name != NULL) {
            uint64_t x = be_uint(v, 5);
            unsigned ym = (unsigned)(x >> 22 & 0x1FFFF);
            int parts[7] = {(int)(ym / 13), (int)(ym % 13), (int)(x >> 17 & 31), (int)(x >> 12 & 31),
                            (int)(x >> 6 & 63), (int)(x & 63), (int)micro};
            *out = PyDateTime_FromDateAndTime(parts[0], parts[1], parts[2], parts[3], parts[4],
                                              parts[5], parts[6]);
            if (*out == NULL)
                *out = server_text(parts, c->a);
        }
        break;
    }
    case PC_TIMESTAMP2: {
        int fb = FSP_BYTES[c->a];
        long long micro = 0;
        if (c->a) {                   /* the fraction read signed, as the library does */
            long long f = (long long)be_uint(v + 4, fb);
            if (f & (1LL << (8 * fb - 1)))
                f -= 1LL << (8 * fb);
            micro = fraction_micro(c->a, f);
            if (micro < 0 || micro >= 1000000)
                return RD_STOP;
        }
        if (c->name != NULL)
            *out = utc_datetime((int32_t)(uint32_t)be_uint(v, 4), (int)micro);
        break;
    }
    case PC_TIME2:
        if (c->name != NULL)
            *out = time2_delta((long long)be_uint(v, 3), (long long)be_uint(v + 3, FSP_BYTES[c->a]),
                               FSP_BYTES[c->a]);
        break;
    case PC_DECIMAL: {
        int precision = c->a, decimals = c->b;
        int whole = precision - decimals;
        int sizes[16], digits[16], parts = 0;
        if (DIG2BYTES[whole % 9]) { sizes[parts] = DIG2BYTES[whole % 9]; digits[parts++] = whole % 9; }
        for (int g = 0; g < whole / 9 + decimals / 9; g++) { sizes[parts] = 4; digits[parts++] = 9; }
        if (DIG2BYTES[decimals % 9]) { sizes[parts] = DIG2BYTES[decimals % 9]; digits[parts++] = decimals % 9; }
        const unsigned char *q = v;
        uint32_t sign_bit = 1u << (8 * sizes[0] - 1);
        int negative = !(q[0] & 0x80);
        char text[72];                /* sign, 65 digits, the point */
        int n = 0, done = 0;
        if (negative)
            text[n++] = '-';
        for (int k = 0; k < parts; k++) {
            uint32_t g = (uint32_t)be_uint(q, sizes[k]);
            q += sizes[k];
            if (k == 0)
                g ^= negative ? sign_bit - 1 : sign_bit;
            else if (negative)
                g ^= (uint32_t)((1ULL << (8 * sizes[k])) - 1);
            if (g >= POW10[digits[k]])
                return RD_STOP;       /* the decoder's "digit group out of range" */
            if (done == whole && decimals)
                text[n++] = '.';
            for (int d = digits[k] - 1; d >= 0; d--, g /= 10)
                text[n + d] = (char)('0' + g % 10);
            n += digits[k];
            done += digits[k];
        }
        if (c->name != NULL) {
            /* the Decimal of the digits with exponent -decimals, negated (zero too) when
             * negative: what the decoder builds, and what Decimal makes of this text */
            PyObject *t = PyUnicode_FromStringAndSize(text, n);
            if (t == NULL)
                return RD_ERROR;
            *out = PyObject_CallOneArg(DECIMAL_TYPE, t);
            Py_DECREF(t);
        }
        break;
    }
    default:
        return RD_STOP;
    }
    if (c->name != NULL && *out == NULL)
        return RD_ERROR;
    *pos = at + width;
    return RD_OK;
}

/* one row image at p[*pos]: the kept columns' values as a new dict (column order) */
static int
read_image(const Plan *plan, const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
           Py_ssize_t null_bytes, PyObject **image)
{
    *image = NULL;
    if (end - *pos < null_bytes)
        return RD_STOP;
    const unsigned char *nulls = p + *pos;
    Py_ssize_t at = *pos + null_bytes;
    PyObject *dict = PyDict_New();
    if (dict == NULL)
        return RD_ERROR;
    for (Py_ssize_t i = 0; i < plan->ncols; i++) {
        const PlanColumn *c = &plan->cols[i];
        PyObject *value;
        if (nulls[i >> 3] & (1 << (i & 7))) {
            if (c->name != NULL && PyDict_SetItem(dict, c->name, Py_None) < 0)
                goto error;
            continue;
        }
        int r = read_value(c, p, &at, end, &value);
        if (r != RD_OK) {
            Py_DECREF(dict);
            return r;
        }
        if (value != NULL) {
            int set = PyDict_SetItem(dict, c->name, value);
            Py_DECREF(value);
            if (set < 0)
                goto error;
        }
    }
    *pos = at;
    *image = dict;
    return RD_OK;
error:
    Py_DECREF(dict);
    return RD_ERROR;
}

static PyObject *row_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* a Record (a NamedTuple of db, table, key, value, msg_id), new reference */
static PyObject *
new_record(PyObject *record_type, PyObject *db, PyObject *table, PyObject *written)
{
    PyObject *items[5] = {db, table, PyTuple_GET_ITEM(written, 0), PyTuple_GET_ITEM(written, 1),
                          PyTuple_GET_ITEM(written, 2)};
    PyTypeObject *type = (PyTypeObject *)record_type;
    if (type->tp_basicsize == PyTuple_Type.tp_basicsize && type->tp_itemsize == PyTuple_Type.tp_itemsize) {
        PyObject *rec = type->tp_alloc(type, 5);   /* a tuple subclass without fields of its own */
        if (rec == NULL)
            return NULL;
        for (int i = 0; i < 5; i++)
            PyTuple_SET_ITEM(rec, i, Py_NewRef(items[i]));
        return rec;
    }
    return PyObject_Vectorcall(record_type, items, 5, NULL);
}

typedef struct {
    uint64_t full_id;         /* the map's 6-byte table id */
    const Plan *plan;         /* NULL: an unmapped table, its rows stepped over */
} TxnMap;

/* the records of one rows event into out; RD_STOP: Python decides the transaction */
static int
rows_records(const unsigned char *raw, Py_ssize_t length, int checksum, uint64_t post_ok,
             TxnMap *maps, int nmaps, PyObject *const *base, long long *row_index,
             PyObject *record_type, PyObject *out)
{
    unsigned type = raw[5];
    Py_ssize_t end = length - (checksum ? 4 : 0), pos = SG_BODY + 8;
    if (type >= 64 || !(post_ok >> type & 1) || end < pos)
        return RD_STOP;
    int v2 = type >= 30;
    int op = v2 ? type - 30 : type - 23;            /* 0 write, 1 update, 2 delete */
    if (v2) {
        if (end - pos < 2 || (raw[pos] | raw[pos + 1] << 8) != 2)
            return RD_STOP;                         /* extra row info: the library reads it */
        pos += 2;
    }
    uint64_t table_id = le_uint(raw + SG_BODY, 6);
    const TxnMap *map = NULL;
    for (int i = 0; i < nmaps; i++)
        if (maps[i].full_id == table_id)
            map = &maps[i];
    if (map == NULL)
        return RD_STOP;                             /* no map in the group: Python refuses it */
    if (map->plan == NULL)
        return RD_OK;                               /* a table no mapping names */
    const Plan *plan = map->plan;
    if (end - pos < 1)
        return RD_STOP;
    uint64_t ncols = raw[pos++];
    if (ncols >= 251 || ncols == 0)
        return RD_STOP;                             /* too wide, or rows of no bytes: Python */
    if (ncols != (uint64_t)plan->ncols)
        return RD_STOP;
    Py_ssize_t width = (Py_ssize_t)(ncols + 7) / 8;
    Py_ssize_t null_bytes[2];
    for (int image = 0; image < (op == 1 ? 2 : 1); image++) {
        if (end - pos < width)
            return RD_STOP;
        int bits = 0;
        for (Py_ssize_t i = 0; i < width; i++) {
            unsigned char b = raw[pos + i];
            unsigned char need = (i == width - 1 && ncols % 8) ? (unsigned char)((1 << (ncols % 8)) - 1) : 0xFF;
            if ((b & need) != need)
                return RD_STOP;                     /* a partial row image: Python */
            for (; b; b &= b - 1)
                bits++;
        }
        null_bytes[image] = (bits + 7) / 8;
        pos += width;
    }
    PyObject *args[A_COUNT];
    memcpy(args, base, sizeof args);
    args[A_KIND] = plan->kind;
    args[A_DB] = plan->db;
    args[A_TABLE] = plan->table;
    args[A_OP] = OP_TEXT[op];
    args[A_PRIMARY_KEY] = plan->primary_key;
    args[A_KEEP] = Py_None;
    while (pos < end) {
        PyObject *first = NULL, *second = NULL;
        int r = read_image(plan, raw, &pos, end, null_bytes[0], &first);
        if (r == RD_OK && op == 1)
            r = read_image(plan, raw, &pos, end, null_bytes[1], &second);
        if (r != RD_OK) {
            Py_XDECREF(first);
            return r;
        }
        args[A_BEFORE] = op == 0 ? Py_None : first;
        args[A_AFTER] = op == 0 ? first : op == 1 ? second : Py_None;
        PyObject *index = PyLong_FromLongLong(*row_index);
        PyObject *written = NULL;
        if (index != NULL) {
            args[A_ROW_INDEX] = index;
            written = row_record(NULL, args, A_COUNT);
            Py_DECREF(index);
        }
        Py_DECREF(first);
        Py_XDECREF(second);
        if (written == NULL)
            return RD_ERROR;
        if (written == Py_None) {
            Py_DECREF(written);
            return RD_STOP;                         /* the Python path writes this row */
        }
        PyObject *rec = new_record(record_type, plan->db, plan->table, written);
        Py_DECREF(written);
        if (rec == NULL || PyList_Append(out, rec) < 0) {
            Py_XDECREF(rec);
            return RD_ERROR;
        }
        Py_DECREF(rec);
        (*row_index)++;
    }
    return pos == end ? RD_OK : RD_STOP;
}

/* plain_run(buf, pos, seq, max_txns, plans, domains, consts) -> (end, next_seq, taken,
 * records, ordinal, gtids, first, xid_pos), or when it took none: False if the buffer held a
 * whole transaction it could not take, None if it held none; see the section's comment. plans: table-map
 * body (bytes, its checksum left out) -> a compile_plan capsule, or None for a table no
 * mapping names; domains: GTID domain -> the last seq_no of the state; consts: (id scope,
 * server, the state's ordinal, max record bytes, to_json, canonical_text, the Record type,
 * whether events end in a checksum, the rows event types whose post-header the server
 * declares as expected (a bit mask by type)). gtids: domain -> (server id, seq_no) of the run's last transaction in it;
 * first: (GTID text, timestamp, ordinal) of its first; xid_pos: the binlog position after
 * its last. */
static PyObject *
plain_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (!arity("plain_run", nargs, 7))
        return NULL;
    PyObject *plans = args[4], *domains = args[5], *consts = args[6];
    if (!PyBytes_Check(args[0]) || !PyDict_CheckExact(plans) || !PyDict_CheckExact(domains)
            || !PyTuple_CheckExact(consts) || PyTuple_GET_SIZE(consts) != 9) {
        PyErr_SetString(PyExc_TypeError, "plain_run(buf, pos, seq, max_txns, plans: dict, domains: dict, consts: tuple of 9)");
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long seq = PyLong_AsLong(args[2]);
    long max_txns = PyLong_AsLong(args[3]);
    long long ordinal = PyLong_AsLongLong(PyTuple_GET_ITEM(consts, 2));
    unsigned long long post_ok = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(consts, 8));
    if (PyErr_Occurred())
        return NULL;
    int checksum = PyObject_IsTrue(PyTuple_GET_ITEM(consts, 7));
    if (checksum < 0)
        return NULL;
    PyObject *record_type = PyTuple_GET_ITEM(consts, 6);
    if (!PyType_Check(record_type)) {
        PyErr_SetString(PyExc_TypeError, "plain_run: the Record type expected");
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(args[0]);

    /* the state's domains: (domain, last seq_no, server id of the run's last, touched) */
    uint32_t dom_id[PR_MAX_DOMAINS];
    uint64_t dom_seq[PR_MAX_DOMAINS];
    uint32_t dom_server[PR_MAX_DOMAINS];
    int dom_touched[PR_MAX_DOMAINS], ndom = 0;
    PyObject *key, *value;
    Py_ssize_t it = 0;
    while (PyDict_Next(domains, &it, &key, &value)) {
        if (ndom == PR_MAX_DOMAINS)
            Py_RETURN_NONE;
        unsigned long d = PyLong_AsUnsignedLong(key);
        unsigned long long s = PyLong_AsUnsignedLongLong(value);
        if (PyErr_Occurred())
            return NULL;
        dom_id[ndom] = (uint32_t)d;
        dom_seq[ndom] = s;
        dom_server[ndom] = 0;
        dom_touched[ndom++] = 0;
    }

    PyObject *base[A_COUNT] = {0};
    base[A_SCOPE] = PyTuple_GET_ITEM(consts, 0);
    base[A_SERVER] = PyTuple_GET_ITEM(consts, 1);
    base[A_MAX_BYTES] = PyTuple_GET_ITEM(consts, 3);
    base[A_TO_JSON] = PyTuple_GET_ITEM(consts, 4);
    base[A_CANONICAL_TEXT] = PyTuple_GET_ITEM(consts, 5);

    Py_ssize_t starts[SG_MAX_EVENTS], ends[SG_MAX_EVENTS];     /* on the stack: callbacks may run another thread's call */
    PyObject *records = PyList_New(0), *first = NULL;
    if (records == NULL)
        return NULL;
    long taken = 0;
    unsigned long xid_pos = 0;
    int stopped = 0;                  /* a whole transaction was there, not taken */
    while (taken < max_txns) {
        int n;
        Py_ssize_t end;
        long next_seq;
        if (!sg_scan(buf, size, pos, seq, checksum, starts, ends, &n, &end, &next_seq))
            break;
        stopped = 1;
        const unsigned char *g = buf + starts[0];
        uint64_t gno = le_uint(g + SG_BODY, 8);
        uint32_t domain = (uint32_t)le_uint(g + SG_BODY + 8, 4), server_id = sg_u32(g + 6);
        uint32_t timestamp = sg_u32(g + 1);
        int d = 0;
        while (d < ndom && dom_id[d] != domain)
            d++;
        uint64_t old = d < ndom ? dom_seq[d] : 0;
        if (gno <= old || gno - old > (uint64_t)(LLONG_MAX - ordinal))
            break;                  /* not newer in its domain: Python warns (versions) */
        if (d == ndom && ndom == PR_MAX_DOMAINS)
            break;
        long long txn_ordinal = ordinal + (long long)(gno - old);
        PyObject *position = PyUnicode_FromFormat("%lu-%lu-%llu", (unsigned long)domain,
                                                  (unsigned long)server_id, (unsigned long long)gno);
        PyObject *commit_ts = position ? PyFloat_FromDouble((double)timestamp) : NULL;
        PyObject *txn_ordinal_obj = commit_ts ? PyLong_FromLongLong(txn_ordinal) : NULL;
        PyObject *txn_records = txn_ordinal_obj ? PyList_New(0) : NULL;
        int r = txn_records ? RD_OK : RD_ERROR;
        TxnMap maps[PR_MAX_MAPS];
        int nmaps = 0;
        long long row_index = 0;
        base[A_POSITION] = position;
        base[A_COMMIT_TS] = commit_ts;
        base[A_ORDINAL] = txn_ordinal_obj;
        for (int i = 1; i < n - 1 && r == RD_OK; i++) {
            const unsigned char *raw = buf + starts[i];
            Py_ssize_t length = ends[i] - starts[i];
            unsigned type = raw[5];
            if (type == SG_ANNOTATE)
                continue;
            if (type == SG_TABLE_MAP) {
                Py_ssize_t body_end = length - (checksum ? 4 : 0);
                if (body_end < SG_BODY + 6 || nmaps == PR_MAX_MAPS) {
                    r = RD_STOP;
                    break;
                }
                PyObject *body = PyBytes_FromStringAndSize((const char *)raw + SG_BODY, body_end - SG_BODY);
                if (body == NULL) {
                    r = RD_ERROR;
                    break;
                }
                PyObject *found = PyDict_GetItemWithError(plans, body);
                Py_DECREF(body);
                if (found == NULL) {
                    r = PyErr_Occurred() ? RD_ERROR : RD_STOP;   /* no plan: Python */
                    break;
                }
                uint64_t id = le_uint(raw + SG_BODY, 6);
                const Plan *plan = NULL;
                if (found != Py_None && (plan = PyCapsule_GetPointer(found, "cachesync.plan")) == NULL) {
                    r = RD_ERROR;
                    break;
                }
                int k = 0;
                while (k < nmaps && maps[k].full_id != id)
                    k++;
                maps[k].full_id = id;
                maps[k].plan = plan;
                if (k == nmaps)
                    nmaps++;
                continue;
            }
            if (type == SG_XID)
                break;
            r = rows_records(raw, length, checksum, post_ok, maps, nmaps, base, &row_index,
                             record_type, txn_records);
        }
        if (r == RD_OK && first == NULL)
            first = Py_BuildValue("(OkO)", position, (unsigned long)timestamp, txn_ordinal_obj);
        if (r == RD_OK && first == NULL)
            r = RD_ERROR;
        if (r == RD_OK) {
            Py_ssize_t at = PyList_GET_SIZE(records);
            if (PyList_SetSlice(records, at, at, txn_records) < 0)
                r = RD_ERROR;
        }
        Py_XDECREF(position);
        Py_XDECREF(commit_ts);
        Py_XDECREF(txn_ordinal_obj);
        Py_XDECREF(txn_records);
        if (r == RD_ERROR)
            goto error;
        if (r == RD_STOP)
            break;
        /* the transaction is taken */
        if (d == ndom) {
            dom_id[ndom] = domain;
            ndom++;
        }
        dom_seq[d] = gno;
        dom_server[d] = server_id;
        dom_touched[d] = 1;
        ordinal = txn_ordinal;
        xid_pos = (unsigned long)sg_u32(buf + starts[n - 1] + 14);
        pos = end;
        seq = next_seq;
        taken++;
        stopped = 0;
    }
    if (taken == 0) {
        Py_DECREF(records);
        Py_XDECREF(first);
        return Py_NewRef(stopped ? Py_False : Py_None);
    }
    PyObject *gtids = PyDict_New();
    if (gtids == NULL)
        goto error;
    for (int d = 0; d < ndom; d++) {
        if (!dom_touched[d])
            continue;
        PyObject *k = PyLong_FromUnsignedLong(dom_id[d]);
        PyObject *v = k ? Py_BuildValue("(kK)", (unsigned long)dom_server[d], (unsigned long long)dom_seq[d]) : NULL;
        int set = v ? PyDict_SetItem(gtids, k, v) : -1;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (set < 0) {
            Py_DECREF(gtids);
            goto error;
        }
    }
    return Py_BuildValue("(nllNLNNk)", pos, seq, taken, records, ordinal, gtids, first, xid_pos);
error:
    Py_DECREF(records);
    Py_XDECREF(first);
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
    {"blake2b_16", blake2b_16, METH_O,
     "blake2b_16(data, /) -> str: hashlib.blake2b(data, digest_size=16).hexdigest()."},
    {"row_record", (PyCFunction)(void (*)(void))row_record, METH_FASTCALL,
     "row_record(scope, server, position, commit_ts, ordinal, row_index, kind, db, table, op, "
     "primary_key, before, after, max_bytes, to_json, canonical_text, keep, /) -> "
     "(key, value, id) | None: one binlog row's Kafka key, encoded event and message id, as the "
     "tailer's Python path makes them from the images trimmed to the columns in keep (a set; "
     "None: every column); None where that path must decide."},
    {"scan_group", (PyCFunction)(void (*)(void))scan_group, METH_FASTCALL,
     "scan_group(buf, pos, seq, checksum, /) -> (end, next_seq, frames) | None: the packets of "
     "one buffered MariaDB event group of the common shape (GTID, table maps, rows, XID), each "
     "frame (type, timestamp, server_id, log_pos, flags, start, end) of its payload in buf; "
     "None when the buffer does not hold one, or (checksum: events end in a CRC32) when an "
     "event of it fails its checksum."},
    {"crc32", crc32, METH_O,
     "crc32(data, /) -> int: zlib.crc32 of a bytes-like object's bytes (what scan_group and "
     "plain_run check binlog events with)."},
    {"compile_plan", (PyCFunction)(void (*)(void))compile_plan, METH_FASTCALL,
     "compile_plan(db, table, kind, primary_key, columns, /) -> capsule: how plain_run reads "
     "and writes the rows of one table map (see the C source)."},
    {"plain_run", (PyCFunction)(void (*)(void))plain_run, METH_FASTCALL,
     "plain_run(buf, pos, seq, max_txns, plans, domains, consts, /) -> tuple | False | None: "
     "the records of the buffered whole transactions of the common shape whose table maps have "
     "plans, up to the first one that has not; False: it took none of a whole one, None: the "
     "buffer held none (see the C source)."},
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
    crc32_init();
    if (RESERVED_PREFIX == NULL && (RESERVED_PREFIX = PyUnicode_InternFromString("cachesync:")) == NULL)
        return NULL;
    static const char *const ops[3] = {"insert", "update", "delete"};
    for (int i = 0; i < 3; i++)
        if (OP_TEXT[i] == NULL && (OP_TEXT[i] = PyUnicode_InternFromString(ops[i])) == NULL)
            return NULL;
    if (EMPTY_TEXT == NULL && (EMPTY_TEXT = PyUnicode_FromString("")) == NULL)
        return NULL;
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL)
        return NULL;
    return PyModuleDef_Init(&module);
}
