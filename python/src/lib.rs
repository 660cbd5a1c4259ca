//! The Python extension module `mmsim._mmsim`: mmsim's command line, and a
//! sweep's plan and single points, for the Python package in `mmsim/`
//! (which turns their JSON into pandas DataFrames and runs a sweep's
//! points as Ray tasks).
//!
//! Everything goes through the same functions as the `mmsim` binary, so
//! the package's results are the command line's bytes. The GIL is
//! released while mmsim runs, so Python threads (and Ray's) go on.

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

create_exception!(
    _mmsim,
    MmsimError,
    PyValueError,
    "An mmsim error: the one line `mmsim` prints after 'mmsim: error: '."
);

fn error(e: mmsim::cli::CliError) -> PyErr {
    MmsimError::new_err(e.to_string())
}

/// Runs one `mmsim` command line (without the program name) and returns
/// what it prints on stdout.
#[pyfunction]
fn execute(py: Python<'_>, args: Vec<String>) -> PyResult<String> {
    py.detach(|| mmsim::cli::execute(&args)).map_err(error)
}

/// A sweep's points, in the grid's order, each as the JSON document
/// `run_point` takes; `args` as `mmsim sweep` takes them.
#[pyfunction]
fn plan(py: Python<'_>, args: Vec<String>) -> PyResult<Vec<String>> {
    py.detach(|| mmsim::cli::sweep::plan(&args)).map_err(error)
}

/// Runs one point of a plan and returns its row: the line `mmsim sweep`
/// writes for it.
#[pyfunction]
fn run_point(py: Python<'_>, point: String) -> PyResult<String> {
    py.detach(|| mmsim::cli::sweep::run_point(&point))
        .map_err(error)
}

/// The rows of the file `path` a resumed sweep keeps, as (point index,
/// row) in the grid's order; `args` as `plan` takes them.
#[pyfunction]
fn done_rows(py: Python<'_>, args: Vec<String>, path: String) -> PyResult<Vec<(usize, String)>> {
    py.detach(|| mmsim::cli::sweep::done_rows(&args, &path))
        .map_err(error)
}

/// mmsim's version and the commit it was built from.
#[pyfunction]
fn version() -> String {
    format!("{} {}", mmsim::VERSION, mmsim::GIT_COMMIT)
}

#[pymodule]
fn _mmsim(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(execute, m)?)?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(run_point, m)?)?;
    m.add_function(wrap_pyfunction!(done_rows, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add("MmsimError", m.py().get_type::<MmsimError>())?;
    Ok(())
}
