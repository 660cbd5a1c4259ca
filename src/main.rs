fn main() {
    std::process::exit(mmsim::cli::main());
}
