//! Generates prescientctl's shell completions and man page from the same
//! clap definition the binary uses (src/cli.rs); main.rs embeds them
//! (`prescientctl completions SHELL`, `prescientctl man`).
use clap::CommandFactory;
use std::path::PathBuf;

#[allow(dead_code)]
#[path = "src/cli.rs"]
mod cli;

fn main() -> std::io::Result<()> {
    println!("cargo:rerun-if-changed=src/cli.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut cmd = cli::Cli::command();
    for (shell, name) in [
        (clap_complete::Shell::Bash, "prescientctl.bash"),
        (clap_complete::Shell::Zsh, "_prescientctl"),
        (clap_complete::Shell::Fish, "prescientctl.fish"),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut cmd, "prescientctl", &mut buf);
        std::fs::write(out.join(name), buf)?;
    }
    let mut man = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut man)?;
    std::fs::write(out.join("prescientctl.1"), man)?;
    Ok(())
}
