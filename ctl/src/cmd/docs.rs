//! `prescientctl completions SHELL` and `prescientctl man`: print what
//! build.rs generated from the command line's definition.

use crate::cli::Shell;

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
