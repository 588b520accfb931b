//! The subcommands, by family: [`rss`] (the core, no host), [`host`]
//! (tuning the host), [`serve`] (servers and load generators, steering
//! another server), [`dataplane`] (pipeline, firewall), [`bench`]; shared
//! argument parsing in [`common`], man pages and completions in [`docs`].
//! A subcommand imports only its family's shared module and [`common`],
//! never another subcommand.

pub mod bench;
pub mod common;
pub mod dataplane;
pub mod docs;
pub mod host;
pub mod rss;
pub mod serve;
