//! The traces of real programs recorded for mmsim (`tests/data/README.md`
//! says how and what), built into the binary: `mmsim run trace --recorded
//! NAME` and the experiments replay them from any directory, an installed
//! binary included.

use super::{Event, LoadError, parse, text_of_bytes};

/// One recorded trace, gzipped.
pub struct Recorded {
    /// The name `--recorded` takes: the file is `tests/data/NAME.trace.gz`.
    pub name: &'static str,
    pub gz: &'static [u8],
}

pub const RECORDED: &[Recorded] = &[
    Recorded {
        name: "make",
        gz: include_bytes!("../../tests/data/make.trace.gz"),
    },
    Recorded {
        name: "python",
        gz: include_bytes!("../../tests/data/python.trace.gz"),
    },
    Recorded {
        name: "pipeline",
        gz: include_bytes!("../../tests/data/pipeline.trace.gz"),
    },
    Recorded {
        name: "build",
        gz: include_bytes!("../../tests/data/build.trace.gz"),
    },
    Recorded {
        name: "boot",
        gz: include_bytes!("../../tests/data/boot.trace.gz"),
    },
    Recorded {
        name: "server",
        gz: include_bytes!("../../tests/data/server.trace.gz"),
    },
    Recorded {
        name: "jvm",
        gz: include_bytes!("../../tests/data/jvm.trace.gz"),
    },
];

pub fn find(name: &str) -> Option<&'static Recorded> {
    RECORDED.iter().find(|r| r.name == name)
}

/// The names, comma-separated, for usage and errors.
pub fn names() -> String {
    let names: Vec<&str> = RECORDED.iter().map(|r| r.name).collect();
    names.join(", ")
}

impl Recorded {
    /// The file name errors give it, e.g. `recorded:make`.
    pub fn file(&self) -> String {
        format!("recorded:{}", self.name)
    }

    /// Unpacks and parses the trace.
    pub fn events(&self) -> Result<Vec<Event>, LoadError> {
        let file = self.file();
        let text = text_of_bytes(&file, self.gz.to_vec())?;
        parse(&file, &text).map_err(LoadError::Parse)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-in copies are the files in tests/data, and they parse.
    #[test]
    fn every_recorded_trace_is_the_test_data_file_and_parses() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        for r in RECORDED {
            let on_disk = std::fs::read(dir.join(format!("{}.trace.gz", r.name))).unwrap();
            assert_eq!(r.gz, &on_disk[..], "{}", r.name);
            let events = r.events().unwrap();
            assert!(events.len() > 900, "{}: {} events", r.name, events.len());
            assert_eq!(find(r.name).map(|f| f.name), Some(r.name));
        }
        assert!(find("no-such").is_none());
    }
}
