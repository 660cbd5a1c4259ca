"""The Python package against the mmsim command line: the same JSON, the
same rows; and a sweep on a local Ray cluster against the local backend.

MMSIM_BIN names the mmsim binary to compare with (scripts/suites/python.sh
sets it); it must be built from the same commit as the package.
"""

import json
import os
import subprocess

import pandas as pd
import pytest

import mmsim

BIN = os.environ.get("MMSIM_BIN", "mmsim")

# A small sweep: three process counts, a feature off and on (6 runs, well
# under a second each).
SWEEP_ARGS = ["usemem", "-n", "1", "--readonly", "-j", "0x200000", "64M"]
VARY = {"n": [1, 2, 4], "huge-zero-mm-flag": ["off", "on"]}
COUNTERS = ["thp_fault_alloc", "pgfault"]


def cli_json(*args):
    out = subprocess.run([BIN, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def test_run_equals_the_cli_json():
    df = mmsim.run("usemem", "-n", "2", "64M", machine="haswell-ep-2s", seed=3, without=["pcp-high-order", "pcp-burst"])
    doc = cli_json("run", "usemem", "-n", "2", "64M", "--machine", "haswell-ep-2s", "--seed", "3",
                   "--without", "pcp-high-order", "--without", "pcp-burst")
    assert df.attrs["json"] == doc
    pd.testing.assert_frame_equal(df, mmsim.run_frame(doc))
    assert len(df) == 1
    assert df.loc[0, "seed"] == 3
    assert df.loc[0, "machine.name"] == "haswell-ep-2s"
    assert df.loc[0, "counters.pgfault"] == doc["counters"]["pgfault"] > 0


def test_compare_equals_the_cli_json():
    df = mmsim.compare("usemem", "-n", "2", "--readonly", "-j", "0x200000", "64M",
                       feature="huge-zero-mm-flag")
    doc = cli_json("compare", "usemem", "-n", "2", "--readonly", "-j", "0x200000", "64M",
                   "--feature", "huge-zero-mm-flag")
    assert df.attrs["json"] == doc
    pd.testing.assert_frame_equal(df, mmsim.compare_frame(doc))
    assert list(df["name"]) == [m["name"] for m in doc["metrics"]]
    assert {"before", "after", "gain_percent"} <= set(df.columns)


def test_reproduce_equals_the_cli_json():
    df = mmsim.reproduce("pcp-high-order")
    doc = cli_json("reproduce", "pcp-high-order")
    assert df.attrs["json"] == doc
    pd.testing.assert_frame_equal(df, mmsim.reproduce_frame(doc))
    rows = doc["experiments"][0]["cases"][0]["rows"]
    assert len(df) == len(rows)
    assert df.loc[0, "figure"] == rows[0]["figure"]
    assert df.loc[0, "before.ours"] == rows[0]["before"]["ours"]


def test_sweep_equals_the_cli_rows():
    df = mmsim.sweep(*SWEEP_ARGS, vary=VARY, counters=COUNTERS)
    argv = [*SWEEP_ARGS, "--vary", "n=1,2,4", "--vary", "huge-zero-mm-flag=off,on",
            "--counters", "thp_fault_alloc,pgfault"]
    out = subprocess.run([BIN, "sweep", *argv], check=True, capture_output=True, text=True)
    assert df.attrs["ndjson"] == out.stdout
    assert list(df["run"]) == list(range(6))
    assert list(df["n"]) == [1, 1, 2, 2, 4, 4]
    assert list(df.columns[:3]) == ["run", "n", "huge-zero-mm-flag"]
    assert (df["throughput"] > 0).all()


def test_bad_input_is_one_line():
    with pytest.raises(mmsim.MmsimError, match="^unknown workload 'nope'"):
        mmsim.run("nope")
    with pytest.raises(mmsim.MmsimError, match=r"^run 1 \(n=0\): usemem: "):
        mmsim.sweep("usemem", "64M", vary={"n": [1, 0]})


def test_a_sweep_on_ray_gives_the_local_rows():
    ray = pytest.importorskip("ray")
    local = mmsim.sweep(*SWEEP_ARGS, vary=VARY, counters=COUNTERS)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = mmsim.sweep(*SWEEP_ARGS, vary=VARY, counters=COUNTERS, backend="ray")
    finally:
        ray.shutdown()
    assert remote.attrs["ndjson"] == local.attrs["ndjson"]
    pd.testing.assert_frame_equal(remote, local)


def test_an_interrupted_ray_sweep_resumes(tmp_path):
    ray = pytest.importorskip("ray")
    local = mmsim.sweep(*SWEEP_ARGS, vary=VARY, counters=COUNTERS)
    lines = local.attrs["ndjson"].splitlines(keepends=True)
    out = tmp_path / "rows.ndjson"
    # As a stopped sweep leaves its file: two rows in the order their runs
    # ended, then a third cut short while being written.
    out.write_text(lines[3] + lines[0] + lines[1][:20])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = mmsim.sweep(*SWEEP_ARGS, vary=VARY, counters=COUNTERS, backend="ray",
                             out=str(out))
    finally:
        ray.shutdown()
    assert remote.attrs["resumed"] == 2
    assert remote.attrs["ndjson"] == local.attrs["ndjson"]
    assert out.read_text() == local.attrs["ndjson"]
    pd.testing.assert_frame_equal(remote, local)
