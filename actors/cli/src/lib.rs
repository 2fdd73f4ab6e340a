//! herder's command line, the `herder` binary's library: Nomad's verbs
//! ([`cli`]), the agent command, the node simulator's and the benchmark's
//! drivers ([`bench`]), and the binary's log setup ([`logging`]). Nothing
//! depends on this crate.

pub mod bench;
pub mod cli;
pub mod logging;
