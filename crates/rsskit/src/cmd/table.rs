//! `rsskit table`: being written (issue 2).

use anyhow::{bail, Result};

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_a: Args) -> Result<()> {
    bail!("'rsskit table' is not implemented yet")
}
