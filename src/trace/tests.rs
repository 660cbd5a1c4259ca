use super::*;

fn error(text: &str) -> String {
    parse("t.trace", text).unwrap_err().to_string()
}

const ROOT: &str = "0 10 10 mmap 0x7f0000000000 0x2000 rw-\n";

#[test]
fn a_trace_parses_and_serializes_back() {
    let text = "\
# a comment
0 10 10 mmap 0x7f0000000000 0x2000 rw-   # trailing comment
5 10 10 fault 0x7f0000000008 w
6 10 10 clone 11
7 10 11 access 0x7f0000001000 ?
8 10 10 fork 12
9 12 12 exec
9 12 12 brk 0x555555559000
10 12 12 madvise 0x7f0000000000 0x1000 dontneed
11 12 12 mprotect 0x7f0000000000 0x1000 r--
12 12 12 munmap 0x7f0000000000 0x1000
12 12 12 mremap 0x7f0000001000 0x1000 0x7f0000100000 0x3000 maymove,fixed,dontunmap
12 12 12 mremap 0x7f0000100000 0x3000 0x7f0000100000 0x1000 -
13 12 12 exit
14 10 11 exit
15 10 10 exit
";
    let events = parse("t.trace", text).unwrap();
    assert_eq!(events.len(), 15);
    assert_eq!(
        events[1].op,
        Op::Fault {
            addr: 0x7f00_0000_0008,
            access: Access::Write
        }
    );
    let again = parse("again", &serialize(&events)).unwrap();
    assert_eq!(again, events);
}

#[test]
fn the_header_round_trips_and_bad_values_are_errors() {
    let meta = Meta {
        thp_enabled: Some("madvise"),
        thp_defrag: Some("defer+madvise"),
        kernel: Some("6.18.44-fc".into()),
        page_size: Some(4096),
        command: Some("sh -c 'seq 3 | wc -l'".into()),
    };
    let text = serialize_with(&parse("t", ROOT).unwrap(), &meta);
    assert!(text.contains("# command: sh -c 'seq 3 | wc -l'\n# kernel: 6.18.44-fc\n# page-size: 4096\n# thp-enabled: madvise\n# thp-defrag: defer+madvise\n"), "{text}");
    assert_eq!(Meta::parse("t", &text).unwrap(), meta);
    let bad = |line: &str| {
        Meta::parse("t", &format!("{line}\n{ROOT}"))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        bad("# thp-defrag: sometimes"),
        "t:1: thp-defrag 'sometimes' is not always, defer, defer+madvise, madvise or never"
    );
    assert_eq!(
        bad("# page-size: 4000"),
        "t:1: page-size 4000 is not a power of two of at least 4096"
    );
    // The streaming reader takes the same header.
    let dir = std::env::temp_dir().join(format!("mmsim-meta-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.trace");
    std::fs::write(&file, &text).unwrap();
    let survey = stream::Stream::open(&file)
        .and_then(stream::Stream::survey)
        .unwrap();
    assert_eq!(survey.meta, meta);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn malformed_lines_name_file_line_and_problem() {
    assert_eq!(
        error("x 10 10 exit\n"),
        "t.trace:1: TIME_NS: 'x' is not a number"
    );
    assert_eq!(
        error(&format!("{ROOT}\n1 10 10 frob 1\n")),
        "t.trace:3: unknown op 'frob' (ops: mmap munmap mremap mprotect brk madvise fork clone exec exit fault access)"
    );
    assert_eq!(
        error(&format!("{ROOT}1 10 10 munmap 0x7f0000000000\n")),
        "t.trace:2: munmap takes 2 arguments, got 1"
    );
    assert_eq!(
        error(&format!(
            "{ROOT}1 10 10 mremap 0x7f0000000000 0x1000 0x7f0000100000 0x1000 move\n"
        )),
        "t.trace:2: mremap flags 'move' are not '-' or a list of maymove, fixed, dontunmap joined by ','"
    );
    assert_eq!(
        error(&format!(
            "{ROOT}1 10 10 mremap 0x7f0000000000 0x1000 0x7f0000100001 0x1000 -\n"
        )),
        "t.trace:2: ADDR 0x7f0000100001 is not a multiple of the page size"
    );
    assert_eq!(
        error(&format!("{ROOT}1 99 99 exit\n")),
        "t.trace:2: unknown pid 99 tid 99 (not created by fork or clone, or exited)"
    );
    assert_eq!(
        error(&format!("{ROOT}1 10 10 munmap 0x7f0000000000 0x1001\n")),
        "t.trace:2: LEN 0x1001 is not a multiple of the page size"
    );
    assert_eq!(
        error(&format!("{ROOT}1 10 10 munmap 0x7f0000000010 0x1000\n")),
        "t.trace:2: ADDR 0x7f0000000010 is not a multiple of the page size"
    );
    assert_eq!(
        error(&format!("{ROOT}1 10 10 mprotect 0x7f0000000000 0 rw-\n")),
        "t.trace:2: zero length"
    );
    assert_eq!(
        error(&format!(
            "{ROOT}1 10 10 mprotect 0x7f0000000000 0x1000 rwz\n"
        )),
        "t.trace:2: protection 'rwz' is not of the form rwx, r--, ---"
    );
    assert_eq!(
        error(&format!("{ROOT}1 10 10 fault 0x1000 x\n")),
        "t.trace:2: access 'x' is not r, w or ?"
    );
    assert_eq!(
        error(&format!("{ROOT}1 10 10 madvise 0x1000 0x1000 MADV_FREE\n")),
        "t.trace:2: unknown madvise advice 'MADV_FREE'"
    );
    assert_eq!(
        error("5 10 10 brk 0x1000\n4 10 10 brk 0x2000\n"),
        "t.trace:2: time goes back (the previous event is at 5 ns)"
    );
    assert_eq!(
        error("0 10 11 exit\n"),
        "t.trace:1: the first event's task must be a process leader (pid 10 == tid), got tid 11"
    );
    assert_eq!(
        error(&format!("{ROOT}1 10 10 clone 10\n")),
        "t.trace:2: task 10 already exists"
    );
}

#[test]
fn absurd_values_are_rejected() {
    assert_eq!(
        error(&format!("{ROOT}1 10 10 mmap 0x7ffffffff000 0x2000 rw-\n")),
        "t.trace:2: range 0x7ffffffff000+0x2000 ends beyond the user address space (0x800000000000)"
    );
    assert_eq!(
        error(&format!("{ROOT}1 10 10 fault 0xffffffff81000000 r\n")),
        "t.trace:2: ADDR: 18446744071578845184 is larger than 140737488355327"
    );
    assert_eq!(
        error("0 5000000 5000000 exit\n"),
        "t.trace:1: PID: 5000000 is larger than 4194304"
    );
    assert_eq!(
        error("0 0 0 exec\n"),
        "t.trace:1: PID: 0 is not a task id (they start at 1)"
    );
    assert_eq!(
        error("2000000000000000 10 10 exit\n"),
        "t.trace:1: TIME_NS: 2000000000000000 is larger than 1000000000000000"
    );
    assert_eq!(
        error("0 10 10 brk 99999999999999999999999\n"),
        "t.trace:1: ADDR: '99999999999999999999999' is not a number"
    );
    let long = format!("0 10 10 exit {}\n", "0".repeat(300));
    assert_eq!(error(&long), "t.trace:1: line longer than 256 bytes");
}

#[test]
fn an_exec_ends_the_other_threads() {
    let text = format!("{ROOT}1 10 10 clone 11\n2 10 10 exec\n3 10 11 exit\n");
    assert_eq!(
        error(&text),
        "t.trace:4: unknown pid 10 tid 11 (not created by fork or clone, or exited)"
    );
}

mod import_tests {
    use super::super::import::{ImportError, Options, import};
    use super::super::{perf, perf_trace, strace};
    use super::*;

    /// strace -f -ttt output on stderr: the root unprefixed, a clone split
    /// over two lines with the child's first call in between, a failed call.
    const STRACE: &str = "\
[pid   100] 1700000000.000100 execve(\"/bin/x\", [\"x\"], 0x7ffc /* 1 vars */) = 0
[pid   100] 1700000000.000200 brk(NULL)       = 0x555555559000
[pid   100] 1700000000.000300 mmap(NULL, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f0000000000
[pid   100] 1700000000.000400 mmap(NULL, 1099511627776000, PROT_READ, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = -1 ENOMEM (Cannot allocate memory)
[pid   100] 1700000000.000500 clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM, child_tid=0x7f, parent_tid=0x7f, exit_signal=0, stack=0x7f, stack_size=0x7fff00, tls=0x7f} <unfinished ...>
[pid   101] 1700000000.000600 madvise(0x7f0000000000, 4096, MADV_DONTNEED) = 0
[pid   100] 1700000000.000700 <... clone3 resumed> => {parent_tid=[101]}, 88) = 101
[pid   101] 1700000000.000800 exit(0)                   = ?
[pid   100] 1700000000.000900 vfork()                   = 102
[pid   102] 1700000000.001000 exit_group(0)             = ?
[pid   102] 1700000000.001100 +++ exited with 0 +++
[pid   100] 1700000000.001200 --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED, si_pid=102} ---
[pid   100] 1700000000.001300 munmap(0x7f0000000000, 5000) = 0
[pid   100] 1700000000.001400 exit_group(0)             = ?
[pid   100] 1700000000.001500 +++ exited with 0 +++
";

    const PERF: &str = "\
         swapper     0/0         0.000000000: PERF_RECORD_MMAP -1/0: [0xffffffff81000000(0x1206448) @ 0xffffffff81000000]: x [kernel.kallsyms]_text
          strace    99/99   1700000000.000050000: page-faults:     564b69eb1130
               x   100/100  1700000000.000150000: PERF_RECORD_MMAP2 100/100: [0x7ffe695e4000(0x21000) @ 0x7ffffffde000 00:00 0 0]: rw-p [stack]
               x   100/100  1700000000.000160000: page-faults:     7ffe69604ff8
               x   100/100  1700000000.000350000: page-faults:     7f0000000010
               x   100/100  1700000000.000360000: PERF_RECORD_MMAP2 100/100: [0x7f0000000000(0x2000) @ 0 00:00 0 0]: rw-p //anon
          x y z   100/101  1700000000.000650000: page-faults:     7f0000001000
               x   100/100  1700000000.000660000: page-faults:     ffffffff8175016a
";

    #[test]
    fn strace_and_perf_merge_in_time_order() {
        let s = strace::parse("s", STRACE).unwrap();
        let p = perf::parse("p", PERF, None).unwrap();
        let (events, summary) = import(&s, Some(&p), STRICT).unwrap();
        let text = serialize(&events);
        let body: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            body,
            [
                "0 100 100 exec",
                "50000 100 100 mmap 0x7ffe695e4000 0x21000 rw-",
                "60000 100 100 fault 0x7ffe69604ff8 ?",
                "100000 100 100 brk 0x555555559000",
                "200000 100 100 mmap 0x7f0000000000 0x2000 rw-",
                "250000 100 100 fault 0x7f0000000010 ?",
                "400000 100 100 clone 101",
                "500000 100 101 madvise 0x7f0000000000 0x1000 dontneed",
                "550000 100 101 fault 0x7f0000001000 ?",
                "700000 100 101 exit",
                "800000 100 100 fork 102",
                "900000 102 102 exit",
                "1200000 100 100 munmap 0x7f0000000000 0x2000",
                "1300000 100 100 exit",
            ]
        );
        assert_eq!(summary.failed_calls(), 1);
        assert_eq!(summary.faults, 3);
        // strace's own fault; the kernel-address one is skipped by perf.
        assert_eq!(summary.faults_of_untraced_tasks, 1);
        assert_eq!(summary.perf_skipped.kernel_faults, 1);
        assert_eq!(summary.perf_skipped.kernel_records, 1);
        assert!(summary.lost().is_empty());
        assert_eq!(parse("again", &text).unwrap(), events);
    }

    #[test]
    fn monotonic_perf_clock_is_refused() {
        let s = strace::parse("s", STRACE).unwrap();
        let p = perf::parse(
            "p",
            "x 100/100 3778.225223: page-faults: 7f0000000010\n",
            None,
        )
        .unwrap();
        let e = import(&s, Some(&p), STRICT).unwrap_err().to_string();
        assert!(e.contains("-k CLOCK_REALTIME"), "{e}");
    }

    #[test]
    fn bad_strace_and_perf_lines_name_the_line() {
        let e = strace::parse("s.txt", "100 1700000000.1 mmap(NULL, 8192\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "s.txt:1: no return value in 'mmap(NULL, 8192'"
        );
        let e = strace::parse("s.txt", "100 12:00 brk(NULL) = 0x1000\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "s.txt:1: bad timestamp '12:00' (record with -ttt, -tt or -t)"
        );
        // A time whose nanoseconds would not fit in 64 bits.
        let e = strace::parse("s.txt", "100 1099511627776.0 brk(NULL) = 0x1000\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "s.txt:1: bad timestamp '1099511627776.0' (record with -ttt, -tt or -t)"
        );
        let e = perf::parse(
            "p.txt",
            "  x 100/100 1099511627776.5: page-faults: 7f00\n",
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("bad time"), "{e}");
        let e = perf::parse("p.txt", "\n  x 100/100 1.5: page-faults:\n", None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.txt:2: a fault without its address (record with -d, print with -F ...,addr)"
        );
    }

    const STRICT: Options = Options { allow_drops: false };
    const ALLOW: Options = Options { allow_drops: true };

    /// The faults of `PERF` as `import` keeps them, for comparing forms.
    fn fault_events(perf_text: &str, fields: Option<perf::Fields>) -> Vec<String> {
        let s = strace::parse("s", STRACE).unwrap();
        let p = perf::parse("p", perf_text, fields).unwrap();
        let (events, _) = import(&s, Some(&p), STRICT).unwrap();
        events
            .iter()
            .filter(|e| matches!(e.op, Op::Fault { .. }))
            .map(|e| e.to_string())
            .collect()
    }

    /// `perf script -F pid,tid,time,addr,ip,sym`: no event name; the
    /// address comes first, the ip (with a symbol) after it. With a CPU
    /// field, the same. Nothing is lost against the named form.
    #[test]
    fn perf_lines_without_an_event_name_are_read_by_shape() {
        let named = fault_events(PERF, None);
        assert_eq!(named.len(), 3);
        let unnamed = "\
   99/99    1700000000.000050000:     564b69eb1130 [unknown]     564b69e00000 main
  100/100   1700000000.000160000:     7ffe69604ff8 [unknown]     7f0000000123 _dl_start
  100/100   1700000000.000350000:     7f0000000010 [unknown]     7f0000000123 _dl_start
  100/101   1700000000.000650000:     7f0000001000 [unknown]     7f0000000123 worker
";
        let mmap = "  x 100/100 1700000000.000150000: PERF_RECORD_MMAP2 100/100: [0x7ffe695e4000(0x21000) @ 0x7ffffffde000 00:00 0 0]: rw-p [stack]\n";
        assert_eq!(fault_events(&format!("{mmap}{unnamed}"), None), named);
        let with_cpu = "\
  x 100/100 [001] 1700000000.000150000: PERF_RECORD_MMAP2 100/100: [0x7ffe695e4000(0x21000) @ 0x7ffffffde000 00:00 0 0]: rw-p [stack]
  x 100/100 [001] 1700000000.000160000: page-faults: 7ffe69604ff8
  x 100/100 [000] 1700000000.000350000: page-faults: 7f0000000010
  x 100/101 [001] 1700000000.000650000: page-faults: 7f0000001000
";
        assert_eq!(fault_events(with_cpu, None), named);
        // A callchain (-g) under a sample is counted, not read as events.
        let chain = format!(
            "{mmap}{}\t    7f0000000123 _dl_start (/lib/ld.so)\n",
            unnamed
        );
        let p = perf::parse("p", &chain, None).unwrap();
        assert_eq!(p.callchain_lines, 1);
        assert_eq!(p.faults(), 4);
    }

    /// One number per line and no event name: addr or ip? An error until
    /// `--perf-fields` says; then read.
    #[test]
    fn an_ambiguous_perf_field_list_needs_perf_fields() {
        let text = "  100/100 1700000000.000160000:     7ffe69604ff8\n  100/100 1700000000.000350000:     7f0000000010\n";
        let e = perf::parse("p.txt", text, None).unwrap_err().to_string();
        assert_eq!(
            e,
            "p.txt:1: the lines carry no event name and one number each, which may be the fault's addr or the ip: give --perf-fields with the list passed to 'perf script -F'"
        );
        let fields = perf::Fields::parse("pid,tid,time,addr").unwrap();
        let p = perf::parse("p.txt", text, Some(fields)).unwrap();
        assert_eq!(p.faults(), 2);
        assert_eq!(
            perf::Fields::parse("pid,time,ip").unwrap_err(),
            "--perf-fields 'pid,time,ip' lacks pid (or tid), time or addr: the import needs all three"
        );
        assert!(perf::Fields::parse("pid,time,addr,bogus").is_err());
    }

    /// perf of another run of the same command: other pids. An error,
    /// exit 2 from the command line; with --allow-drops, every fault is
    /// counted as not imported.
    #[test]
    fn perf_of_a_different_run_is_an_error() {
        let s = strace::parse("s", STRACE).unwrap();
        let other = PERF.replace("100/10", "300/30");
        let p = perf::parse("p", &other, None).unwrap();
        let e = import(&s, Some(&p), STRICT).unwrap_err();
        assert!(matches!(e, ImportError::NotOneRun(_)), "{e}");
        assert_eq!(
            e.to_string(),
            "the strace and perf files are not of one run: none of perf's 4 faults is of a task strace traced (record strace under perf, as docs/trace-format.md says)"
        );
        let (_, summary) = import(&s, Some(&p), ALLOW).unwrap();
        assert_eq!((summary.faults, summary.faults_of_untraced_tasks), (0, 4));
        // The same tasks a day later: no overlap in time.
        let later = PERF.replace("1700000000.", "1700086400.");
        let p = perf::parse("p", &later, None).unwrap();
        let e = import(&s, Some(&p), STRICT).unwrap_err().to_string();
        assert!(e.contains("do not overlap strace's calls"), "{e}");
    }

    /// A fault of a traced task after it exited is a lost event: an error
    /// without --allow-drops, counted with it.
    #[test]
    fn faults_outside_a_task_lifetime_are_lost_and_counted() {
        let s = strace::parse("s", STRACE).unwrap();
        let late = format!("{PERF}  x 102/102 1700000000.001150000: page-faults: 7f0000000010\n");
        let p = perf::parse("p", &late, None).unwrap();
        let e = import(&s, Some(&p), STRICT).unwrap_err().to_string();
        assert_eq!(
            e,
            "events of the program would be lost: 1 fault of a traced task while strace shows it not alive (--allow-drops imports the rest)"
        );
        let (_, summary) = import(&s, Some(&p), ALLOW).unwrap();
        assert_eq!(summary.faults_outside_lifetime, 1);
        assert_eq!(summary.faults, 3);
    }

    fn strace_error(text: &str) -> String {
        strace::parse("s.txt", text).unwrap_err().to_string()
    }

    #[test]
    fn a_returned_pid_out_of_range_is_an_error_naming_the_line() {
        assert_eq!(
            strace_error(
                "100 1.000001 brk(NULL) = 0x1000\n100 1.000002 clone3({flags=CLONE_VM, exit_signal=SIGCHLD}, 88) = 4294967297\n"
            ),
            "s.txt:2: clone3 returned 4294967297, which is not a pid (1..=4194304)"
        );
        assert_eq!(
            strace_error("100 1.000002 fork() = 5000000\n"),
            "s.txt:1: fork returned 5000000, which is not a pid (1..=4194304)"
        );
    }

    fn import_text(text: &str, options: Options) -> Result<(Vec<Event>, Summary), ImportError> {
        import(&strace::parse("s", text).unwrap(), None, options)
    }

    use super::super::import::Summary;

    #[test]
    fn a_clone_of_a_live_task_is_lost_and_counted() {
        let text = "\
100 1.000001 brk(NULL) = 0x555555559000
100 1.000002 clone(child_stack=NULL, flags=CLONE_VM|CLONE_THREAD) = 100
100 1.000003 exit_group(0) = ?
";
        let e = import_text(text, STRICT).unwrap_err().to_string();
        assert!(e.contains("1 fork or clone of a task already alive"), "{e}");
        let (events, summary) = import_text(text, ALLOW).unwrap();
        assert_eq!(summary.creations_dropped, 1);
        assert_eq!(summary.calls, 2);
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn unfinished_calls_and_unknown_exits_are_counted() {
        let text = "\
100 1.000001 brk(NULL) = 0x555555559000
100 1.000002 mmap(NULL, 8192, PROT_READ, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0 <unfinished ...>
100 1.000003 +++ killed by SIGKILL +++
200 1.000004 +++ exited with 0 +++
";
        let (_, summary) = import_text(text, STRICT).unwrap();
        assert_eq!(summary.strace_skipped.never_resumed, 1);
        assert_eq!(summary.exits_of_unknown_tasks, 1);
        let warnings = summary.warnings().join("\n");
        assert!(
            warnings.contains("1 call was begun and never resumed"),
            "{warnings}"
        );
        assert!(
            warnings.contains("1 exit of a task never seen alive was skipped"),
            "{warnings}"
        );
        assert!(warnings.contains("the trace has no faults"), "{warnings}");
        // The exit that follows an exit_group is expected: not counted.
        let (_, summary) = import_text(
            "100 1.000001 brk(NULL) = 0x555555559000\n100 1.000002 exit_group(0) = ?\n100 1.000003 +++ exited with 0 +++\n",
            STRICT,
        )
        .unwrap();
        assert_eq!(summary.exits_of_unknown_tasks, 0);
    }

    #[test]
    fn mremap_of_every_form_is_imported() {
        let text = "\
100 1.000001 mmap(NULL, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f0000000000
100 1.000002 mremap(0x7f0000000000, 8192, 16385, MREMAP_MAYMOVE) = 0x7f0000100000
100 1.000003 mremap(0x7f0000100000, 20480, 4096, 0) = 0x7f0000100000
100 1.000004 mremap(0x7f0000100000, 4096, 4096, MREMAP_MAYMOVE|MREMAP_FIXED, 0x7f0000200000) = 0x7f0000200000
100 1.000005 mremap(0x7f0000200000, 4096, 4096, MREMAP_MAYMOVE|MREMAP_DONTUNMAP, 0) = 0x7f0000300000
100 1.000006 mremap(0x7f0000300000, 4096, 8192, 0) = -1 ENOMEM (Cannot allocate memory)
100 1.000007 mremap(0x7f0000300000, 0, 8192, MREMAP_MAYMOVE) = 0x7f0000400000
";
        let (events, summary) = import_text(text, STRICT).unwrap();
        let ops: Vec<String> = events.iter().skip(1).map(|e| e.op.to_string()).collect();
        assert_eq!(
            ops,
            [
                "mremap 0x7f0000000000 0x2000 0x7f0000100000 0x5000 maymove",
                "mremap 0x7f0000100000 0x5000 0x7f0000100000 0x1000 -",
                "mremap 0x7f0000100000 0x1000 0x7f0000200000 0x1000 maymove,fixed",
                "mremap 0x7f0000200000 0x1000 0x7f0000300000 0x1000 maymove,dontunmap",
            ]
        );
        assert_eq!(summary.strace_skipped.failed, 1);
        assert_eq!(
            summary.strace_skipped.ignored.get("mremap of length 0"),
            Some(&1)
        );
        assert!(
            summary.warnings()[0].starts_with("1 mremap of length 0 call is not in the format: the replay does not see the mappings it changed")
        );
        // Round trip through the format.
        let again = parse("again", &serialize(&events)).unwrap();
        assert_eq!(again, events);
    }

    /// `-t`: whole seconds of the day; lines of one second keep their file
    /// order; with perf it is refused (too coarse to place faults).
    #[test]
    fn strace_t_keeps_the_file_order_within_a_second() {
        let text = "\
100 12:00:01 mmap(NULL, 4096, PROT_READ, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f0000001000
100 12:00:01 mmap(NULL, 4096, PROT_READ, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f0000000000
100 12:00:02 munmap(0x7f0000000000, 4096) = 0
";
        let (events, _) = import_text(text, STRICT).unwrap();
        let got: Vec<String> = events.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            got,
            [
                "0 100 100 mmap 0x7f0000001000 0x1000 r--",
                "0 100 100 mmap 0x7f0000000000 0x1000 r--",
                "1000000000 100 100 munmap 0x7f0000000000 0x1000",
            ]
        );
        let parsed = strace::parse("s.txt", text).unwrap();
        assert_eq!(parsed.clock, strace::Clock::Seconds);
        let perf = perf::Perf::default();
        let error = import::import(&parsed, Some(&perf), STRICT).unwrap_err();
        assert!(
            error.to_string().contains("strace -t gives whole seconds"),
            "{error}"
        );
        let mixed = "100 12:00:01 brk(NULL) = 0x1000\n100 12:00:01.5 brk(NULL) = 0x1000\n";
        assert_eq!(
            strace::parse("s.txt", mixed).unwrap_err().to_string(),
            "s.txt:2: timestamps change between -t, -tt and -ttt"
        );
    }

    /// `-tt` across midnight: the times after it are on the next day.
    #[test]
    fn strace_tt_across_midnight_is_read_as_the_next_day() {
        let text = "\
100 23:59:59.999000 brk(NULL) = 0x555555559000
100 00:00:00.001000 brk(0x55555557a000) = 0x55555557a000
";
        let s = strace::parse("s", text).unwrap();
        assert_eq!(s.midnight_line, Some(2));
        let (events, _) = import(&s, None, STRICT).unwrap();
        assert_eq!(events[1].time_ns, 2_000_000);
        // perf's clock cannot be matched to it.
        let p = perf::parse(
            "p",
            "x 100/100 1700000000.000160000: page-faults: 7f00\n",
            None,
        )
        .unwrap();
        let e = import(&s, Some(&p), STRICT).unwrap_err().to_string();
        assert!(e.contains("pass midnight (at its line 2)"), "{e}");
    }

    #[test]
    fn time_going_back_within_a_task_is_an_error() {
        assert_eq!(
            strace_error(
                "100 1.000005 brk(NULL) = 0x1000\n101 1.000001 brk(NULL) = 0x1000\n100 1.000004 brk(NULL) = 0x1000\n"
            ),
            "s.txt:3: time goes back for task 100 (its line 1 is later)"
        );
    }

    #[test]
    fn perf_trace_output_is_recognised() {
        let text = "     0.000 ( 0.004 ms): sh/4918 brk() = 0x55b38f5da000\n";
        let e = strace_error(text);
        assert!(
            e.starts_with("s.txt:1: this looks like 'perf trace' output"),
            "{e}"
        );
        let e = perf::parse("p", text, None).unwrap_err().to_string();
        assert!(e.contains("'perf trace' output"), "{e}");
    }

    /// xz and zstd inputs are read (the files are `printf 'hello\n' | xz`
    /// and `| zstd`); others are named with the command that undoes them.
    #[test]
    fn xz_and_zstd_inputs_are_read_and_other_compressions_named() {
        let xz = [
            0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00, 0x00, 0x04, 0xe6, 0xd6, 0xb4, 0x46, 0x02, 0x00,
            0x21, 0x01, 0x16, 0x00, 0x00, 0x00, 0x74, 0x2f, 0xe5, 0xa3, 0x01, 0x00, 0x05, 0x68,
            0x65, 0x6c, 0x6c, 0x6f, 0x0a, 0x00, 0x00, 0x00, 0xa5, 0x60, 0x97, 0xf1, 0x94, 0xf6,
            0xfd, 0xe0, 0x00, 0x01, 0x1e, 0x06, 0xc1, 0x2f, 0xa4, 0x1d, 0x1f, 0xb6, 0xf3, 0x7d,
            0x01, 0x00, 0x00, 0x00, 0x00, 0x04, 0x59, 0x5a,
        ];
        assert_eq!(text_of_bytes("t.xz", xz.to_vec()).unwrap(), "hello\n");
        let zstd = [
            0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x58, 0x31, 0x00, 0x00, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
            0x0a, 0x53, 0x88, 0xbd, 0x91,
        ];
        assert_eq!(text_of_bytes("t.zst", zstd.to_vec()).unwrap(), "hello\n");
        let e = text_of_bytes("t.xz", b"\xfd7zXZ\x00\x00rest".to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.xz: xz: "), "{e}");
        // Cut short, each says so in words (xz's was its decoder's Debug
        // text: "IoError(Error { kind: UnexpectedEof, .. })").
        // Cut inside its LZMA2 chunk, the decoder says so in its words.
        let e = text_of_bytes("t.xz", xz[..30].to_vec())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "t.xz: xz: corrupt (LZMA2 expected 6 uncompressed bytes: failed to fill whole buffer)"
        );
        let e = text_of_bytes("t.xz", xz[..12].to_vec())
            .unwrap_err()
            .to_string();
        assert_eq!(e, "t.xz: xz: truncated (the stream ends early)");
        // zstd cut inside a block names what it could not read, in words.
        let cut = "zstd: corrupt (Failed to parse block header: Error while reading bytes for Raw: failed to fill whole buffer)";
        let e = text_of_bytes("t.zst", zstd[..12].to_vec())
            .unwrap_err()
            .to_string();
        assert_eq!(e, format!("t.zst: {cut}"));
        // The streaming reader (`mmsim run trace`) says the same.
        let dir = std::env::temp_dir().join(format!("mmsim-zstd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t.zst");
        std::fs::write(&file, &zstd[..12]).unwrap();
        let e = stream::Stream::open(&file)
            .and_then(stream::Stream::survey)
            .err()
            .unwrap()
            .to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.ends_with(cut), "{e}");
        let e = text_of_bytes("t.bz2", b"BZh91AY&SY".to_vec())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "t.bz2: bzip2-compressed: decompress it first ('bzip2 -d t.bz2'), or compress it with gzip"
        );
    }

    /// One thread's mmap is split by another thread's munmap that freed
    /// the address it returns (as in the recorded server): in a process of
    /// several threads the mmap is timed at its return, after the munmap;
    /// in a process of one thread a split call keeps its start.
    #[test]
    fn a_split_mmap_of_a_threaded_process_is_timed_at_its_return() {
        let text = "\
100 1700000000.000100 execve(\"/bin/x\", [\"x\"], 0x7ffc /* 1 vars */) = 0
100 1700000000.000200 clone(child_stack=0x7f, flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM) = 101
101 1700000000.000300 mmap(NULL, 262144, PROT_READ|PROT_WRITE, MAP_SHARED|MAP_ANONYMOUS, -1, 0) = 0x7f0000000000
100 1700000000.000400 mmap(NULL, 262144, PROT_READ|PROT_WRITE, MAP_SHARED|MAP_ANONYMOUS, -1, 0 <unfinished ...>
101 1700000000.000500 munmap(0x7f0000000000, 262144) = 0
100 1700000000.000600 <... mmap resumed>) = 0x7f0000000000
101 1700000000.000700 exit(0) = ?
100 1700000000.000800 mmap(NULL, 8192, PROT_READ, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0 <unfinished ...>
100 1700000000.000900 <... mmap resumed>) = 0x7f0000100000
";
        let s = strace::parse("s", text).unwrap();
        let (events, _) = import(&s, None, STRICT).unwrap();
        let body: Vec<String> = events.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            body,
            [
                "0 100 100 exec",
                "100000 100 100 clone 101",
                "200000 100 101 mmap 0x7f0000000000 0x40000 rw-",
                "400000 100 101 munmap 0x7f0000000000 0x40000",
                "500000 100 100 mmap 0x7f0000000000 0x40000 rw-",
                "600000 100 101 exit",
                // One thread again: timed at its start.
                "700000 100 100 mmap 0x7f0000100000 0x2000 r--",
            ]
        );
    }

    /// `perf trace -i DATA -T` of `perf trace record -d` data, with what
    /// `perf script --show-mmap-events` printed of it: the untimed start
    /// of the root's execve goes before the mappings it made, mmap is
    /// timed at its return (less perf's rounding), the fault tracepoints
    /// are faults with the write bit, and the rest is counted.
    #[test]
    fn perf_trace_calls_with_perf_script_mappings_and_faults() {
        let calls = "\
         ? (         ): x/100  ... [continued]: execve())                = 0
  1000.000 ( 0.010 ms): x/100 mmap(len: 8192, prot: READ|WRITE, flags: PRIVATE|ANONYMOUS) = 0x7f0000000000
  1000.020 ( 0.003 ms): x/100 munmap(addr: 0x7f0000000000, len: 8192) = 0
  1000.040 (         ): x/100 exit_group()                           = ?
";
        let script = "\
 swapper     0/0         0.000000000: PERF_RECORD_MMAP -1/0: [0xffffffff81000000(0x1276508) @ 0xffffffff81000000]: x [kernel.kallsyms]_text
       x   100/100   1.000000500: PERF_RECORD_MMAP2 100/100: [0x7ffe695e4000(0x21000) @ 0x7ffffffde000 00:00 0 0]: rw-p [stack]
       x   100/100   1.000001000:     raw_syscalls:sys_enter: NR 9 (0, 2000, 3, 22, ffffffff, 0)
       x   100/100   1.000009500: exceptions:page_fault_user: address=0x7f0000000010 ip=0x55550000 error_code=0x6
       x   100/100   1.000011000: PERF_RECORD_MMAP2 100/100: [0x7f0000000000(0x2000) @ 0x7f0000000000 00:00 0 0]: rw-p //anon
       x   100/100   1.000030000: exceptions:page_fault_kernel: address=0x7ffe69604ff8 ip=0xffffffff81000000 error_code=0x0
       x   100/100   1.000031000: exceptions:page_fault_user: address=0xffffffff81000000 ip=0xffffffff81000000 error_code=0x0
";
        let (mut s, mut p) = perf_trace::parse("calls", calls).unwrap();
        let sp = perf::parse("script", script, None).unwrap();
        perf_trace::add_perf_script(&mut s, &mut p, sp).unwrap();
        let (events, summary) = import(&s, Some(&p), STRICT).unwrap();
        let body: Vec<String> = events.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            body,
            [
                "0 100 100 exec",
                "0 100 100 mmap 0x7ffe695e4000 0x21000 rw-",
                "8500 100 100 mmap 0x7f0000000000 0x2000 rw-",
                "9000 100 100 fault 0x7f0000000010 w",
                "19500 100 100 munmap 0x7f0000000000 0x2000",
                "29500 100 100 fault 0x7ffe69604ff8 r",
                "39500 100 100 exit",
            ]
        );
        assert_eq!(summary.exec_mappings, 1, "{summary}");
        assert_eq!(summary.perf_mappings_not_exec, 1, "{summary}");
        let skipped = &summary.perf_skipped;
        assert_eq!(
            (
                skipped.other_events,
                skipped.kernel_faults,
                skipped.kernel_records
            ),
            (1, 1, 1),
            "{summary}"
        );
        assert!(summary.lost().is_empty(), "{summary}");

        // perf trace's own relative times cannot be put on perf script's.
        let relative = calls.replace("  1000.0", "     0.0");
        let (mut s, mut p) = perf_trace::parse("calls", &relative).unwrap();
        let sp = perf::parse("script", script, None).unwrap();
        let e = perf_trace::add_perf_script(&mut s, &mut p, sp).unwrap_err();
        assert!(e.contains("perf trace -i DATA -T"), "{e}");
        // Faults in both files would be imported twice.
        let with_fault = format!(
            "{calls}  1000.050 (         ): x/100 exceptions:page_fault_user(address: 0x7f0000000010, ip: 0x1, error_code: 6)\n"
        );
        let (mut s, mut p) = perf_trace::parse("calls", &with_fault).unwrap();
        let sp = perf::parse("script", script, None).unwrap();
        let e = perf_trace::add_perf_script(&mut s, &mut p, sp).unwrap_err();
        assert!(
            e.starts_with("both files hold faults (1 in perf trace's, 2 in perf script's)"),
            "{e}"
        );
    }
}
