//! The status page (`GET /`) and the run pages (`GET /runs/{id}`), rendered on the
//! server from the `templates/` folder so they read without JavaScript; `page.js`
//! then draws the live charts. This module only wires its parts together.

pub(super) mod assets;
mod compare;
mod hardware;
mod history;
pub(super) mod home;
mod image;
mod live;
pub(super) mod run;
mod stages;
mod state;
mod svg;
#[cfg(test)]
mod testing;
mod text;

pub use compare::Prices;
pub(super) use history::history_parts;
pub(super) use state::{HealthVerdicts, PageState};
