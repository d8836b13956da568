//! `tinyperf run`: executes a suite's stages in this process.

use crate::cli::args::RunArgs;

pub fn main(_args: &RunArgs) -> anyhow::Result<i32> {
    anyhow::bail!("tinyperf run: not implemented")
}
