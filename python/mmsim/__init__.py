"""mmsim from Python: the Linux memory-management subsystem on simulated
hardware, its runs as pandas DataFrames.

Each function takes what the ``mmsim`` command takes (the workload and its
flags as strings, mmsim's options as keyword arguments: ``machine=``,
``seed=``, ``without=["pcp-burst"]``, ``set=["pcp_list_op=30"]``,
``memcg=True``) and returns a DataFrame whose columns are the names of the
command's ``--json`` output, nested names joined with a dot
(``counters.pgfault``). The whole JSON document is in ``df.attrs["json"]``.

    import mmsim
    df = mmsim.sweep(experiment="huge-zero-page", vary={"n": [1, 8, 18, 36, 72]})
    df.pivot(index="n", columns="change", values="throughput")

``sweep(..., backend="ray")`` runs each point as a Ray task, on the cluster
``ray.init(address=...)`` connects to (or one started on this machine);
its rows are the same bytes as the local backend's.
"""

import json

import pandas as pd

from . import _mmsim
from ._mmsim import MmsimError

__all__ = ["run", "compare", "reproduce", "sweep", "cli", "version", "MmsimError"]


def version():
    """mmsim's version and the commit it was built from."""
    return _mmsim.version()


def cli(*args):
    """Runs one ``mmsim`` command line and returns what it prints.

    Raises MmsimError with mmsim's one-line message on bad input.
    """
    return _mmsim.execute([str(a) for a in args])


def _options(options):
    """Keyword arguments as mmsim's long options: ``thp_enabled="never"``
    is ``--thp-enabled never``, ``memcg=True`` is ``--memcg``, a list
    repeats the option."""
    argv = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv


def _frame(records, document):
    frame = pd.json_normalize(records)
    frame.attrs["json"] = document
    return frame


def run_frame(document):
    """The DataFrame of a ``mmsim run --json`` document: one row."""
    return _frame(document, document)


def compare_frame(document):
    """The DataFrame of a ``mmsim compare --json`` document: one row per
    metric, before and after (its ``metrics``)."""
    return _frame(document["metrics"], document)


def reproduce_frame(document):
    """The DataFrame of a ``mmsim reproduce --json`` document: one row per
    published figure, with its experiment's id and its case's name."""
    records = []
    for experiment in document["experiments"]:
        for case in experiment["cases"]:
            for row in case["rows"]:
                records.append(
                    {"experiments.id": experiment["id"], "cases.name": case["name"], **row}
                )
    return _frame(records, document)


def run(workload, *args, **options):
    """``mmsim run WORKLOAD ARGS... --json`` as a one-row DataFrame."""
    text = cli("run", workload, *args, *_options(options), "--json")
    return run_frame(json.loads(text))


def compare(workload, *args, feature, **options):
    """``mmsim compare WORKLOAD ARGS... --feature F --json``: one row per
    metric with ``before``, ``after`` and ``gain_percent``."""
    text = cli("compare", workload, *args, "--feature", feature, *_options(options), "--json")
    return compare_frame(json.loads(text))


def reproduce(*experiments, **options):
    """``mmsim reproduce [ID...] --json``: one row per published figure."""
    text = cli("reproduce", *experiments, *_options(options), "--json")
    return reproduce_frame(json.loads(text))


def _sweep_args(args, vary, counters, options):
    argv = [str(a) for a in args]
    for name, values in (vary or {}).items():
        if isinstance(values, (list, tuple)):
            values = ",".join(str(v) for v in values)
        argv += ["--vary", f"{name}={values}"]
    if counters:
        argv += ["--counters", ",".join(counters)]
    return argv + _options(options)


def sweep_frame(ndjson):
    """The DataFrame of a sweep's NDJSON rows: one row per run, its
    columns the rows' fields in order."""
    rows = [json.loads(line) for line in ndjson.splitlines() if line]
    frame = pd.DataFrame(rows)
    frame.attrs["json"] = rows
    return frame


def _run_point(point):
    # A Ray task: imports the extension in the worker.
    from mmsim import _mmsim as native

    return native.run_point(point)


def sweep(*args, vary=None, counters=None, backend="local", address=None, **options):
    """``mmsim sweep ARGS... --vary NAME=V,...``: one row per run, in the
    grid's order.

    ``args`` are the workload and its flags (or a spec file ending in
    .toml); ``vary`` maps each parameter to its values (the first varies
    slowest); ``counters`` names counters each row carries; other keyword
    arguments are options of ``mmsim sweep`` or ``mmsim run``
    (``experiment=``, ``machine=``, ``out=``, ``jobs=``...).

    ``backend="local"`` runs on this machine's cores. ``backend="ray"``
    runs each point as a Ray task: on the cluster at ``address`` (or the
    one ``ray.init()`` finds or starts), unless Ray is already initialised.
    Every node needs this package installed. With ``out=``, either backend
    resumes as ``mmsim sweep --out`` does: rows already in the file (same
    point, command and mmsim build) are kept and only the others run
    (``df.attrs["resumed"]`` counts them on Ray). ``df.attrs["ndjson"]``
    holds the rows as ``mmsim sweep`` writes them, byte for byte.
    """
    argv = _sweep_args(args, vary, counters, options)
    if backend == "local":
        ndjson = cli("sweep", *argv)
        if "out" in options and options["out"]:
            with open(options["out"]) as f:
                ndjson = f.read()
    elif backend == "ray":
        for unsupported in ("csv", "plot", "jobs"):
            if options.get(unsupported):
                raise ValueError(f"sweep(backend='ray') does not take {unsupported}=")
        import ray

        if not ray.is_initialized():
            ray.init(address=address)
        points = _mmsim.plan(argv)
        out = options.get("out")
        # Resumable as `mmsim sweep --out`: the rows already in the file
        # (same point, command and mmsim build) are kept, the others run.
        done = dict(_mmsim.done_rows(argv, out)) if out else {}
        resumed = len(done)
        task = ray.remote(num_cpus=1)(_run_point)
        pending = {task.remote(p): i for i, p in enumerate(points) if i not in done}
        if out:
            _write(out, "".join(done[i] + "\n" for i in sorted(done)))
        # Each row is appended as its task ends, so a stopped sweep keeps it.
        with open(out, "a") if out else _Discard() as f:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    i = pending.pop(ref)
                    done[i] = ray.get(ref)
                    f.write(done[i] + "\n")
                    f.flush()
        ndjson = "".join(done[i] + "\n" for i in range(len(points)))
        if out:
            _write(out, ndjson)
    else:
        raise ValueError(f"unknown backend {backend!r} (local or ray)")
    frame = sweep_frame(ndjson)
    frame.attrs["ndjson"] = ndjson
    if backend == "ray":
        frame.attrs["resumed"] = resumed
    return frame


class _Discard:
    """A file that keeps nothing: the Ray backend without ``out=``."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, text):
        pass

    def flush(self):
        pass


def _write(path, text):
    """Replaces ``path`` with ``text`` through a temporary file and a
    rename, as ``mmsim sweep`` does, so a stop leaves the old or the new."""
    import os

    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
