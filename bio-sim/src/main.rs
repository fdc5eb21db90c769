//! The `biosim` binary: everything it does is in [`bio_sim::cli`].

fn main() -> std::process::ExitCode {
    bio_sim::cli::main()
}
