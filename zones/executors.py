"""The executors' Python, chosen and checked before a job hands Spark a function of ours.

PySpark's Python workers run `python3` from the PATH unless PYSPARK_PYTHON says otherwise;
`spark.pyspark.python` counts only under spark-submit (which turns it into PYSPARK_PYTHON). A
user's own script run with a venv's Python would thus send its tasks to a `python3` without
pyarrow, and learn it a minute later under eighty JVM frames. So, before the first function is
pickled (`prepare`):

- the executors' Python is `spark.pyspark.python` if set, else PYSPARK_PYTHON, else, on a local
  master (the executors are this machine's), this interpreter;
- this package ships itself to them (zones.shipping), unless they run this very interpreter
  on this machine and it has the package installed;
- unless they run this very interpreter on this machine, one task asks them, once per context,
  whether they can import pyarrow and this package's Spark side; a Python that cannot, or
  cannot start, is one line naming what to set (`ExecutorPythonError`).
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import sys
from typing import Any

from pulsar_lookup_gateway.zones.pairs import ZonesError
from pulsar_lookup_gateway.zones.shipping import PACKAGE, ship

#: The setting that names the executors' Python.
PYTHON_SETTING = "spark.pyspark.python"
#: What the executors must import: PySpark's Arrow needs, and this package's Spark side (its
#: lookup core imports pydantic, shipped in the archive).
NEEDED_MODULES = ("pyarrow", "pulsar_lookup_gateway.zones.pairs")

# (application id, Python) already checked: one task per context and Python, not per job.
_checked: set[tuple[str, str]] = set()


class ExecutorPythonError(ZonesError):
    """The executors' Python cannot run the job (one line, naming what to set)."""


def is_local(master: str) -> bool:
    """`local`, `local[N]`, `local[*]`, `local[N,F]`: tasks run in the driver's JVM, whose
    Python workers are this machine's processes."""
    return re.fullmatch(r"local(\[[^\]]*\])?", master) is not None


def installed() -> bool:
    """Whether this interpreter imports this package wherever it runs: from its site (an
    install, an editable one's finder, a .pth) or PYTHONPATH, not only from the folder of the
    script it runs (`sys.path[0]`), which its Python workers do not have."""
    if importlib.machinery.PathFinder.find_spec(PACKAGE, sys.path[1:]) is not None:
        return True
    builtin = (importlib.machinery.PathFinder, importlib.machinery.BuiltinImporter,
               importlib.machinery.FrozenImporter)  # fmt: skip
    for finder in sys.meta_path:
        if finder in builtin or not hasattr(finder, "find_spec"):
            continue
        try:
            if finder.find_spec(PACKAGE, None) is not None:
                return True
        except Exception:  # a third-party finder's failure is no answer
            continue
    return False


def choose_python(context: Any) -> str:
    """Sets and returns the Python the context's workers run (see the module's rule)."""
    chosen = context.getConf().get(PYTHON_SETTING) or os.environ.get("PYSPARK_PYTHON")
    if not chosen and is_local(context.master):
        chosen = sys.executable
    if chosen:
        # Read by PySpark when it wraps each function (sql.udf, the RDD's and data sources').
        context.pythonExec = chosen
    return str(context.pythonExec)


def prepare(spark: Any) -> None:
    """Makes `spark`'s (a SparkSession's or a SparkContext's) executors ready for our functions:
    their Python chosen, this package shipped, their Python checked. Raises
    ExecutorPythonError when it cannot import what the job needs."""
    context = getattr(spark, "sparkContext", spark)
    python = choose_python(context)
    if is_local(context.master) and python == sys.executable:
        # This interpreter: it imports pyarrow and, installed, this package (its workers get
        # this environment), so nothing is shipped: a 10 MB archive built, copied, unpacked.
        if not installed():
            ship(context)
        return
    ship(context)
    key = (str(context.applicationId), python)
    if key not in _checked:
        check(context, python)
        _checked.add(key)


def check(context: Any, python: str) -> None:
    """One task of one partition imports NEEDED_MODULES in an executor's Python worker."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

    try:
        found = context.parallelize([0], 1).mapPartitions(_importer()).collect()
    except Py4JJavaError as exc:
        raise ExecutorPythonError(_cannot_start(python, str(exc.java_exception))) from None
    version, executable, missing = found[0]
    if missing:
        raise ExecutorPythonError(
            f"the executors' Python ({executable}, Python {version}) cannot import {missing}: "
            f"set {PYTHON_SETTING} (or PYSPARK_PYTHON) to a Python "
            f"{sys.version_info[0]}.{sys.version_info[1]} with pyarrow on every executor"
        )


def _importer() -> Any:
    # A nested function: cloudpickle sends it by value, with the globals it reads
    # (NEEDED_MODULES), so a worker unpickles it without importing anything of ours.
    def imports(_: Any) -> Any:
        import importlib
        import platform
        import sys

        missing = ""
        for name in NEEDED_MODULES:
            try:
                importlib.import_module(name)
            except Exception as exc:  # whatever the import raises is the answer
                missing = f"{name} ({type(exc).__name__}: {exc})"
                break
        yield platform.python_version(), sys.executable, missing

    return imports


def _cannot_start(python: str, java_trace: str) -> str:
    """One line out of the JVM's trace of a Python worker that did not run the task."""
    lines = [line.strip() for line in java_trace.splitlines() if line.strip()]
    reason = next(
        (line for line in lines if "Cannot run program" in line or "error=2" in line),
        None,
    )
    if reason is None:
        python_errors = [
            line
            for line in lines
            if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", line)
            and not line.startswith(("org.", "java.", "py4j.", "scala."))
        ]
        reason = python_errors[-1] if python_errors else lines[0] if lines else "no reason given"
    return (
        f"the executors cannot run Python {python!r} ({reason[:300]}): set {PYTHON_SETTING} "
        f"(or PYSPARK_PYTHON) to a Python {sys.version_info[0]}.{sys.version_info[1]} with "
        "pyarrow on every executor"
    )
