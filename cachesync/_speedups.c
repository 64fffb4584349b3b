/* cachesync._speedups: Kafka's default partitioner hash in C.
 *
 * The tailer computes every row's partition before packing (schema/partition.py); in
 * Python, murmur2 took about 4 % of the tailer thread on single-row transactions.
 * Built by `make install` (pyproject.toml, an optional extension); when it is missing,
 * schema/partition.py uses its pure-Python functions, which the same tests check.
 *
 * murmur2 is org.apache.kafka.common.utils.Utils.murmur2 (seed 0x9747b28c), returned
 * unsigned; partition_for is (murmur2(key) & 0x7fffffff) % partitions, as Kafka's
 * DefaultPartitioner (and kafka-python's) picks a keyed record's partition.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

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
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "partition_for expected 2 arguments, got %zd", nargs);
        return NULL;
    }
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

static PyMethodDef methods[] = {
    {"murmur2", murmur2, METH_O,
     "murmur2(data, /) -> int: Kafka's murmur2 of a bytes-like object's bytes (unsigned 32 bits)."},
    {"partition_for", (PyCFunction)(void (*)(void))partition_for, METH_FASTCALL,
     "partition_for(key, partitions, /) -> int: the partition Kafka's default partitioner "
     "gives a keyed record (partitions: 1..2147483647)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "cachesync._speedups",
    "Compiled accelerators (optional; pure-Python fallbacks in schema/partition.py).",
    0, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&module);
}
