//! Reading a trace a line at a time, so that a replay holds one event and
//! not the whole trace: host memory independent of the trace's length, and
//! no cap on its events.
//!
//! Each line is held to the rules of [`super::parse`] (the same
//! [`Checker`]). A gzip or zstd file is decompressed as it is read; an xz
//! file is decompressed whole first (the xz decoder writes to a buffer),
//! so only its compressed size is saved. A line is read up to
//! `LINE_BYTES_MAX` bytes: a longer one is skipped to its end if it is a
//! comment, and an error otherwise, so no line can fill host memory.
//!
//! A replay reads the file once: [`Stream::header`] reads only up to the
//! first event (the header a run needs before it starts), and the run's
//! own stream checks each line as it replays it. How far through the file
//! a stream is ([`Stream::read_so_far`]) comes from the bytes read off the
//! input, so progress needs no count of the events first.

use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{
    Checker, Event, LINE_BYTES_MAX, LoadError, Meta, ParseError, Problem, XZ_MAGIC, ZSTD_MAGIC,
    other_compression,
};

/// The bytes read from the file (or decompressed) at a time: few system
/// calls, and few lines cut at the buffer's end (which the fast reader
/// leaves to the full parser).
const BUFFER_BYTES: usize = 256 << 10;

/// A trace being read.
pub struct Stream {
    file: String,
    reader: Box<dyn BufRead + Send>,
    /// The bytes read off the input so far (compressed bytes for a
    /// compressed file), and its size: how far through it the stream is.
    read: ReadSoFar,
    checker: Checker,
    /// Lines read so far (the number of the last one).
    line: usize,
    /// The header so far: comment lines before the first event.
    meta: Meta,
    events: u64,
    /// The last line read, at most `LINE_BYTES_MAX + 1` bytes of it.
    buf: Vec<u8>,
}

/// How far through its input a [`Stream`] is: a handle that stays valid
/// while the stream is borrowed (for a replay's progress report).
#[derive(Clone, Debug)]
pub struct ReadSoFar {
    bytes: Arc<AtomicU64>,
    size: u64,
}

impl ReadSoFar {
    fn new(size: u64) -> ReadSoFar {
        ReadSoFar {
            bytes: Arc::new(AtomicU64::new(0)),
            size,
        }
    }

    /// The fraction of the input read so far, 0 to 1 (read-ahead
    /// included: for the progress report only).
    pub fn fraction(&self) -> f64 {
        let bytes = self.bytes.load(Ordering::Relaxed);
        (bytes as f64 / self.size.max(1) as f64).min(1.0)
    }
}

/// A reader that counts the bytes read through it into a [`ReadSoFar`].
struct Counted<R> {
    inner: R,
    bytes: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// What one pass over a whole trace found: how many events, the last one's
/// time, and the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Survey {
    pub events: u64,
    pub span_ns: u64,
    pub meta: Meta,
}

impl Stream {
    /// Opens a trace file: plain, gzip, xz or zstd.
    pub fn open(path: &Path) -> Result<Stream, LoadError> {
        let file = path.display().to_string();
        let io = |error| LoadError::Io {
            file: file.clone(),
            error,
        };
        let opened = File::open(path).map_err(io)?;
        let size = opened.metadata().map_err(io)?.len();
        let read = ReadSoFar::new(size);
        let counted = Counted {
            inner: opened,
            bytes: read.bytes.clone(),
        };
        let mut raw = BufReader::with_capacity(BUFFER_BYTES, counted);
        let magic = raw.fill_buf().map_err(io)?.to_vec();
        if let Some(name) = other_compression(&magic) {
            // The same one-line error as a whole-file read gives.
            return Err(super::text_of_bytes(&file, magic)
                .err()
                .unwrap_or(LoadError::Io {
                    file: file.clone(),
                    error: std::io::Error::other(format!("{name}-compressed")),
                }));
        }
        let reader: Box<dyn BufRead + Send> = if magic.starts_with(&[0x1f, 0x8b]) {
            Box::new(BufReader::with_capacity(
                BUFFER_BYTES,
                flate2::read::MultiGzDecoder::new(raw),
            ))
        } else if magic.starts_with(ZSTD_MAGIC) {
            let decoder = ruzstd::decoding::StreamingDecoder::new(raw).map_err(|e| {
                io(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("zstd: {e}"),
                ))
            })?;
            Box::new(BufReader::with_capacity(BUFFER_BYTES, ZstdErrors(decoder)))
        } else if magic.starts_with(XZ_MAGIC) {
            let mut bytes = Vec::new();
            raw.read_to_end(&mut bytes).map_err(io)?;
            let text = super::text_of_bytes(&file, bytes)?;
            // How far through the text, now that the file is all read.
            let text = text.into_bytes();
            let read = ReadSoFar::new(text.len() as u64);
            let counted = Counted {
                inner: Cursor::new(text),
                bytes: read.bytes.clone(),
            };
            let reader = BufReader::with_capacity(BUFFER_BYTES, counted);
            return Ok(Stream::new(file, Box::new(reader), read));
        } else if let Some(kind) = super::binary_kind(&magic) {
            // A binary file's first line was "longer than 256 bytes".
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                kind,
            )));
        } else {
            Box::new(raw)
        };
        Ok(Stream::new(file, reader, read))
    }

    /// A trace in gzipped bytes (a recorded trace built into the binary).
    pub fn of_gz(file: String, gz: &'static [u8]) -> Stream {
        let read = ReadSoFar::new(gz.len() as u64);
        let counted = Counted {
            inner: gz,
            bytes: read.bytes.clone(),
        };
        let reader =
            BufReader::with_capacity(BUFFER_BYTES, flate2::read::MultiGzDecoder::new(counted));
        Stream::new(file, Box::new(reader), read)
    }

    fn new(file: String, reader: Box<dyn BufRead + Send>, read: ReadSoFar) -> Stream {
        Stream {
            file,
            reader,
            read,
            checker: Checker::default(),
            line: 0,
            meta: Meta::default(),
            events: 0,
            buf: Vec::new(),
        }
    }

    fn error(&self, problem: Problem) -> LoadError {
        LoadError::Parse(ParseError {
            file: self.file.clone(),
            line: self.line,
            problem,
        })
    }

    /// The next event, or None at the end of the trace.
    pub fn next_event(&mut self) -> Result<Option<Event>, LoadError> {
        loop {
            // Nearly every line of a long trace is an access or a fault,
            // read in place; anything else, and any line that fails a
            // check, is read again below by the full parser.
            let chunk = self.reader.fill_buf().map_err(|error| LoadError::Io {
                file: self.file.clone(),
                error,
            })?;
            if let Some((event, used)) = super::fastline::line(chunk)
                && self.checker.accept(&event).is_ok()
            {
                self.reader.consume(used);
                self.line += 1;
                self.events += 1;
                return Ok(Some(event));
            }
            if !self.read_line()? {
                return Ok(None);
            }
            let Ok(line) = std::str::from_utf8(&self.buf) else {
                return Err(LoadError::Io {
                    file: self.file.clone(),
                    error: std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("line {}: not UTF-8 text", self.line),
                    ),
                });
            };
            let line = line.strip_suffix('\r').unwrap_or(line);
            if self.events == 0 && line.trim_start().starts_with('#') {
                let taken = self.meta.header_line(line).map_err(|p| self.error(p))?;
                if taken {
                    continue;
                }
            }
            match self.checker.line(line) {
                Ok(Some(event)) => {
                    self.events += 1;
                    return Ok(Some(event));
                }
                Ok(None) => {}
                Err(problem) => {
                    // A recording given for a trace: say to import it.
                    if self.events == 0
                        && let Some((kind, flag)) = super::recording_kind(line)
                    {
                        return Err(LoadError::NotImported {
                            file: self.file.clone(),
                            kind,
                            flag,
                        });
                    }
                    return Err(self.error(problem));
                }
            }
        }
    }

    /// Reads the next line into `buf`, without its newline; false at the
    /// end. A line longer than `LINE_BYTES_MAX` keeps its first bytes
    /// (enough for the checker to call it a comment or too long).
    fn read_line(&mut self) -> Result<bool, LoadError> {
        self.buf.clear();
        let io = |error| LoadError::Io {
            file: self.file.clone(),
            error,
        };
        let mut any = false;
        loop {
            let chunk = self.reader.fill_buf().map_err(io)?;
            if chunk.is_empty() {
                break;
            }
            any = true;
            let (part, newline) = match chunk.iter().position(|&b| b == b'\n') {
                Some(at) => (&chunk[..at], true),
                None => (chunk, false),
            };
            let room = (LINE_BYTES_MAX + 1).saturating_sub(self.buf.len());
            self.buf.extend_from_slice(&part[..part.len().min(room)]);
            let used = part.len() + usize::from(newline);
            self.reader.consume(used);
            if newline {
                break;
            }
        }
        if any {
            self.line += 1;
        }
        // A cut line must still fail the length check (or stay a comment):
        // it holds one byte more than the limit, and a cut in the middle of
        // a UTF-8 sequence is trimmed away.
        if self.buf.len() > LINE_BYTES_MAX {
            while std::str::from_utf8(&self.buf).is_err() && !self.buf.is_empty() {
                self.buf.pop();
            }
            while self.buf.len() <= LINE_BYTES_MAX {
                self.buf.push(b'x');
            }
        }
        Ok(any)
    }

    /// How far through its input the stream is (see [`ReadSoFar`]).
    pub fn read_so_far(&self) -> ReadSoFar {
        self.read.clone()
    }

    /// Reads the trace up to its first event, checking each line: the
    /// header, all there is of it (header lines come before any event). A
    /// trace with no event is an error. The rest of the file is not read:
    /// a replay checks each line as it reads it.
    pub fn header(mut self) -> Result<Meta, LoadError> {
        if self.next_event()?.is_none() {
            return Err(LoadError::NoEvents { file: self.file });
        }
        Ok(self.meta)
    }

    /// Reads the whole trace, checking every line, holding none: its
    /// events, span and header. A trace with no event is an error.
    pub fn survey(mut self) -> Result<Survey, LoadError> {
        let mut span_ns = 0;
        while let Some(event) = self.next_event()? {
            span_ns = event.time_ns;
        }
        if self.events == 0 {
            return Err(LoadError::NoEvents { file: self.file });
        }
        Ok(Survey {
            events: self.events,
            span_ns,
            meta: self.meta,
        })
    }
}

/// A zstd decoder whose read errors say what is wrong in words
/// (`super::zstd_problem`), as a whole-file read's do.
struct ZstdErrors<R>(R);

impl<R: Read> Read for ZstdErrors<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("zstd: {}", super::zstd_problem(&e)),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(text: &str) -> Stream {
        let bytes = text.as_bytes().to_vec();
        let read = ReadSoFar::new(bytes.len() as u64);
        let counted = Counted {
            inner: Cursor::new(bytes),
            bytes: read.bytes.clone(),
        };
        Stream::new("t".into(), Box::new(BufReader::new(counted)), read)
    }

    fn all(text: &str) -> Result<Vec<Event>, String> {
        let mut s = stream(text);
        let mut out = Vec::new();
        while let Some(e) = s.next_event().map_err(|e| e.to_string())? {
            out.push(e);
        }
        Ok(out)
    }

    /// The stream reads what `parse` reads, and fails where it fails, with
    /// the same message.
    #[test]
    fn a_stream_reads_and_rejects_as_parse_does() {
        let long_comment = format!("# {}\n", "c".repeat(1000));
        let texts = [
            "# mmsim trace v1\n0 10 10 mmap 0x7f0000000000 0x2000 rw-\r\n\n1 10 10 fault 0x7f0000000008 w # c\n2 10 10 clone 11\n3 10 11 exit\n".to_string(),
            format!("{long_comment}0 10 10 exit\n"),
            format!("0 10 10 exit {}\n", "0".repeat(300)),
            "0 10 10 exit\n1 10 10 exit\n".to_string(),
            "5 10 10 brk 0x1000\n4 10 10 brk 0x2000".to_string(),
            "0 10 10 exit\n0 10 10 frob\n".to_string(),
            // Lines the fast reader takes, and lines like them it leaves.
            "0 10 10 access 0x7f0000000008 w\n1 10 10 fault 4096 ?\r\n2 10 10 access 0x10 r # c\n".to_string(),
            "0 10 10 access 0x1000 r\n1 11 11 access 0x1000 r\n".to_string(),
            "0 10 11 access 0x1000 r\n".to_string(),
            "5 10 10 access 0x1000 r\n4 10 10 access 0x1000 r\n".to_string(),
            "5 10 10 access 0x1000 r\n6 10 10 access 0x800000000000 r\n".to_string(),
            "5 10 10 access 0x1000 r\n6 10 10 access 0x1000 r".to_string(),
            "5 10 10 clone 11\n6 10 11 access 0x1000 w\n7 10 11 exit\n8 10 11 access 0x1000 w\n"
                .to_string(),
        ];
        for text in &texts {
            let parsed = super::super::parse("t", text).map_err(|e| e.to_string());
            assert_eq!(all(text), parsed, "{text}");
        }
    }

    /// Lines cut at the end of the reader's buffer are read whole: a buffer
    /// of 7 bytes cuts nearly every line, at every place in turn.
    #[test]
    fn lines_cut_by_the_buffer_are_read_whole() {
        let mut text = String::from("# mmsim trace v1\n0 10 10 mmap 0x7f0000000000 0x2000 rw-\n");
        for i in 1..200u64 {
            let op = if i % 3 == 0 { "fault" } else { "access" };
            let rw = ["r", "w", "?"][(i % 5 % 3) as usize];
            text.push_str(&format!(
                "{i} 10 10 {op} {:#x} {rw}\n",
                0x7f0000000000 + i * 8
            ));
        }
        let parsed = super::super::parse("t", &text).unwrap();
        for capacity in [7, 64, 1 << 10] {
            let reader = BufReader::with_capacity(capacity, Cursor::new(text.clone().into_bytes()));
            let mut s = Stream::new("t".into(), Box::new(reader), ReadSoFar::new(1));
            let mut read = Vec::new();
            while let Some(e) = s.next_event().unwrap() {
                read.push(e);
            }
            assert_eq!(read, parsed, "buffer of {capacity} bytes");
            assert_eq!(s.line, 201);
        }
    }

    /// The header is read up to the first event and no further: a bad line
    /// after it is left to the run.
    #[test]
    fn the_header_is_read_to_the_first_event() {
        let text = "# mmsim trace v1\n# thp-enabled: never\n# page-size: 65536\n0 10 10 brk 0x1000\n1 10 10 frob\n";
        let meta = stream(text).header().unwrap();
        assert_eq!(meta.thp_enabled, Some("never"));
        assert_eq!(meta.page_size, Some(65536));
        let mut s = stream(text);
        let read = s.read_so_far();
        assert_eq!(read.fraction(), 0.0);
        assert!(s.next_event().unwrap().is_some());
        assert_eq!(read.fraction(), 1.0, "the whole text is in the buffer");
        let e = s.next_event().unwrap_err().to_string();
        assert!(e.starts_with("t:5: unknown op 'frob'"), "{e}");
        let e = stream("# only a comment\n")
            .header()
            .unwrap_err()
            .to_string();
        assert!(e.contains("no events"), "{e}");
        let e = stream("# thp-enabled: sometimes\n0 10 10 exit\n")
            .header()
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "t:1: thp-enabled 'sometimes' is not always, madvise or never"
        );
    }

    #[test]
    fn the_survey_counts_and_reads_the_header() {
        let s =
            stream("# mmsim trace v1\n# thp-enabled: madvise\n0 10 10 brk 0x1000\n7 10 10 exit\n");
        let survey = s.survey().unwrap();
        assert_eq!((survey.events, survey.span_ns), (2, 7));
        assert_eq!(survey.meta.thp_enabled, Some("madvise"));
        let e = stream("# only a comment\n")
            .survey()
            .unwrap_err()
            .to_string();
        assert!(e.contains("no events"), "{e}");
        let e = stream("# thp-enabled: sometimes\n")
            .survey()
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "t:1: thp-enabled 'sometimes' is not always, madvise or never"
        );
        let e = stream("4918  1795308992.225467 execve(\"/usr/bin/sh\") = 0\n")
            .survey()
            .unwrap_err()
            .to_string();
        assert!(e.contains("this is strace output"), "{e}");
    }
}
