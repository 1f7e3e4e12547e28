/* The watch check compiled, for benchmarks/key_floor.py only: it is not part of the package.

   Each watched object is compared, by identity, with what it held when walked: a list's items; a dict's
   keys and values in order; an instance's class, its __dict__ and every entry of it. It reads more than the
   package's check (every entry, not only the fields the walk reads) and so is only as exact for objects
   whose read fields all live in their __dict__, which holds for pydantic-ai's message dataclasses. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *
unchanged(PyObject *self, PyObject *args)
{
    PyObject *objects, *snapshots;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &objects, &PyList_Type, &snapshots))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(objects);
    if (PyList_GET_SIZE(snapshots) != n) Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *obj = PyList_GET_ITEM(objects, i);
        PyObject *snap = PyList_GET_ITEM(snapshots, i);
        if (!PyTuple_CheckExact(snap)) { PyErr_SetString(PyExc_TypeError, "snapshot"); return NULL; }
        Py_ssize_t m = PyTuple_GET_SIZE(snap);
        PyObject **want = &PyTuple_GET_ITEM(snap, 0);
        PyObject *dict;
        if (PyList_CheckExact(obj)) {
            if (PyList_GET_SIZE(obj) != m) Py_RETURN_FALSE;
            PyObject **have = ((PyListObject *)obj)->ob_item;
            for (Py_ssize_t j = 0; j < m; j++) if (have[j] != want[j]) Py_RETURN_FALSE;
            continue;
        }
        Py_ssize_t start = 0;
        if (PyDict_CheckExact(obj)) {
            dict = obj;
        } else {
            if (m < 2 || (PyObject *)Py_TYPE(obj) != want[0]) Py_RETURN_FALSE;
            dict = PyObject_GenericGetDict(obj, NULL);
            if (dict == NULL) return NULL;
            Py_DECREF(dict);  /* still held by obj */
            if (dict != want[1]) Py_RETURN_FALSE;
            start = 2;
        }
        if (PyDict_GET_SIZE(dict) * 2 != m - start) Py_RETURN_FALSE;
        Py_ssize_t pos = 0, j = start;
        PyObject *k, *v;
        while (PyDict_Next(dict, &pos, &k, &v)) {
            if (k != want[j] || v != want[j + 1]) Py_RETURN_FALSE;
            j += 2;
        }
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {{"unchanged", unchanged, METH_VARARGS, "Whether every object holds what its snapshot says, by identity."}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_watch_floor", NULL, -1, methods};
PyMODINIT_FUNC PyInit__watch_floor(void) { return PyModule_Create(&module); }
