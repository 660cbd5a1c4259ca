#![no_main]
// The body is mmsim::cli::fuzz's, which tests/fuzz_corpus.rs also runs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| (mmsim::cli::fuzz::target("disk_profile").unwrap().run)(data));
