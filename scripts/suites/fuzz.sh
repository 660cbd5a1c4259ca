#!/usr/bin/env bash
# The fuzz targets (fuzz/, README "Fuzzing"): each runs for a bounded time
# from its corpus in fuzz/corpus/NAME/; a crash, a hang (a run over 10 s),
# an abort or an error of more than one line fails the suite.
#
# Stable Rust is enough: cargo-fuzz (from crates.io, installed under
# target/fuzz-tools/ when missing) builds the targets with libFuzzer's
# coverage instrumentation (`-Cpasses=sancov-module` and LLVM options,
# all stable) and, with `--sanitizer none`, without AddressSanitizer,
# whose flag alone needs nightly. It buys little here: mmsim has no unsafe
# code on these paths, and a panic or an abort is what the targets catch.
# libfuzzer-sys compiles libFuzzer's C++: a C++ compiler is installed
# (Debian's g++) where there is none.
#
# MMSIM_FUZZ_SECONDS (default 8) is each target's time; new inputs the
# fuzzers find go to target/fuzz-work/NAME/ (the repository's corpus stays
# as it is; copy an input there to keep it), crashes to
# target/fuzz-work/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${MMSIM_FUZZ_SECONDS:-8}
# A fixed seed, so a failure in CI is found again by the same command
# (MMSIM_FUZZ_SEED=N to explore others).
seed=${MMSIM_FUZZ_SEED:-1}
tools=$PWD/target/fuzz-tools
export PATH=$tools/bin:$PATH
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz 0.13 from crates.io into target/fuzz-tools (a few minutes)"
    cargo install cargo-fuzz --version '^0.13' --locked --root "$tools" --quiet
fi
if ! command -v c++ >/dev/null 2>&1; then
    echo "fuzz: installing g++ (Debian) for libFuzzer"
    sudo=$(command -v sudo || true)
    $sudo apt-get update -qq && $sudo apt-get install -y -qq g++ >/dev/null
fi
fuzz=(cargo fuzz)
fuzz_flags=(--sanitizer none --target-dir target/fuzz)
start=$SECONDS
"${fuzz[@]}" build "${fuzz_flags[@]}" 2>&1 | tail -n 1
echo "fuzz: built in $((SECONDS - start)) s"

targets=$("${fuzz[@]}" list)
work=target/fuzz-work
mkdir -p "$work/artifacts"
failed=()
for target in $targets; do
    mkdir -p "$work/$target"
    log="$work/$target.log"
    if "${fuzz[@]}" run "${fuzz_flags[@]}" "$target" "$work/$target" "fuzz/corpus/$target" -- \
        -max_total_time="$seconds" -seed="$seed" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$work/artifacts/$target-" -print_final_stats=1 >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        echo "fuzz: $target: ${runs:-?} runs in ${seconds} s, no failure"
    else
        echo "fuzz: $target FAILED:"
        grep -E "panicked|ERROR|Test unit written|timeout" "$log" | head -n 8
        failed+=("$target")
    fi
done
echo "fuzz: ${#failed[@]} of $(echo $targets | wc -w) targets failed, $((SECONDS - start)) s in all"
[ ${#failed[@]} -eq 0 ]
