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
13 12 12 exit
14 10 11 exit
15 10 10 exit
";
    let events = parse("t.trace", text).unwrap();
    assert_eq!(events.len(), 13);
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
fn malformed_lines_name_file_line_and_problem() {
    assert_eq!(
        error("x 10 10 exit\n"),
        "t.trace:1: TIME_NS: 'x' is not a number"
    );
    assert_eq!(
        error(&format!("{ROOT}\n1 10 10 frob 1\n")),
        "t.trace:3: unknown op 'frob' (ops: mmap munmap mprotect brk madvise fork clone exec exit fault access)"
    );
    assert_eq!(
        error(&format!("{ROOT}1 10 10 munmap 0x7f0000000000\n")),
        "t.trace:2: munmap takes 2 arguments, got 1"
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
    use super::super::import::import;
    use super::super::{perf, strace};
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
        let p = perf::parse("p", PERF).unwrap();
        let (events, summary) = import(&s, Some(&p)).unwrap();
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
        assert_eq!(summary.faults_dropped, 1);
        assert_eq!(parse("again", &text).unwrap(), events);
    }

    #[test]
    fn monotonic_perf_clock_is_refused() {
        let s = strace::parse("s", STRACE).unwrap();
        let p = perf::parse("p", "x 100/100 3778.225223: page-faults: 7f0000000010\n").unwrap();
        let e = import(&s, Some(&p)).unwrap_err().to_string();
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
            "s.txt:1: bad timestamp '12:00' (record with -ttt or -tt)"
        );
        // A time whose nanoseconds would not fit in 64 bits.
        let e = strace::parse("s.txt", "100 1099511627776.0 brk(NULL) = 0x1000\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "s.txt:1: bad timestamp '1099511627776.0' (record with -ttt or -tt)"
        );
        let e =
            perf::parse("p.txt", "  x 100/100 1099511627776.5: page-faults: 7f00\n").unwrap_err();
        assert!(e.to_string().contains("bad time"), "{e}");
        let e = perf::parse("p.txt", "\n  x 100/100 1.5: page-faults:\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.txt:2: a fault without its address (record with -d, print with -F ...,addr)"
        );
    }
}
