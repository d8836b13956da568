//! `tinyperf start|cancel|status|runs|show`: talk to the agent over D-Bus.
//! (Placeholder: not implemented yet.)

use super::args::{ClientArgs, RunIdArgs, RunsArgs, StartArgs};

pub async fn start(_args: &StartArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented")
}
pub async fn cancel(_args: &RunIdArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented")
}
pub async fn status(_args: &ClientArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented")
}
pub async fn runs(_args: &RunsArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented")
}
pub async fn show(_args: &RunIdArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented")
}
