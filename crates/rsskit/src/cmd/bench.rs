//! `rsskit bench ...`: micro-benchmarks (being written, issue 2).

use anyhow::{bail, Result};

#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// ns per Toeplitz hash for each implementation.
    Toeplitz,
}

pub fn run(_c: BenchCommand) -> Result<()> {
    bail!("'rsskit bench' is not implemented yet")
}
