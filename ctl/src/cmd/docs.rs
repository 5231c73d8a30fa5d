//! `prescientctl completions SHELL` and `prescientctl man`: print what
//! build.rs generated from the command line's definition.

use crate::cli::{Cli, Shell};
use crate::client::{fail, Res, EXIT_REFUSED};
use clap::CommandFactory;
use std::path::Path;

pub fn completions(shell: Shell) {
    print!(
        "{}",
        match shell {
            Shell::Bash => include_str!(concat!(env!("OUT_DIR"), "/prescientctl.bash")),
            Shell::Zsh => include_str!(concat!(env!("OUT_DIR"), "/_prescientctl")),
            Shell::Fish => include_str!(concat!(env!("OUT_DIR"), "/prescientctl.fish")),
        }
    );
}

pub fn man() {
    print!(
        "{}",
        include_str!(concat!(env!("OUT_DIR"), "/prescientctl.1"))
    );
}

/// Writes prescientctl.1 and one page per subcommand into `dir` (the
/// pages the main page's SEE ALSO names), for packages.
pub fn man_pages(dir: &Path) -> Res<()> {
    std::fs::create_dir_all(dir)
        .and_then(|()| clap_mangen::generate_to(Cli::command(), dir))
        .map_err(|e| fail(EXIT_REFUSED, format!("{}: {e}", dir.display())))
}
