//! Man pages and shell completions, generated from the CLI's own clap
//! definitions so they cannot drift from `--help`: `rsskit completions
//! SHELL` prints one script (for people who install with cargo), the
//! maintainers' `rsskit __gen-docs` (not part of `Cli`) writes every page and script (the committed copies in
//! `docs/man/` and `completions/`, checked by `tests/docs_fresh.rs`, are what
//! the Debian package installs).

use anyhow::{bail, Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;
use std::path::{Path, PathBuf};

/// Section 8: system administration commands (rsskit tunes the host as root).
const SECTION: &str = "8";
const MANUAL: &str = "System Manager's Manual";

/// The shells whose scripts are committed and packaged, with their file
/// names (the names bash-completion, zsh and fish look up for `rsskit`).
pub const PACKAGED_SHELLS: [(Shell, &str); 3] =
    [(Shell::Bash, "rsskit.bash"), (Shell::Zsh, "_rsskit"), (Shell::Fish, "rsskit.fish")];

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to print the completion script for (bash, zsh, fish, elvish, powershell).
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The first argument that selects the generator instead of the CLI.
pub const GEN_DOCS: &str = "__gen-docs";

/// `rsskit __gen-docs --man DIR --completions DIR`.
#[derive(clap::Parser, Debug)]
#[command(
    name = "rsskit __gen-docs",
    about = "Write every man page and the bash/zsh/fish completion scripts"
)]
pub struct GenDocsCli {
    #[command(flatten)]
    pub args: GenDocsArgs,
}

#[derive(clap::Args, Debug)]
pub struct GenDocsArgs {
    /// Directory for the man pages (rsskit.8, rsskit-plan.8, ...); created if missing.
    #[arg(long, value_name = "DIR")]
    pub man: PathBuf,
    /// Directory for the bash, zsh and fish completion scripts; created if missing.
    #[arg(long, value_name = "DIR")]
    pub completions: PathBuf,
}

/// The completion script for `shell`, for the command named `rsskit`.
pub fn completion_script(shell: Shell) -> Vec<u8> {
    let mut cmd = crate::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "rsskit", &mut out);
    out
}

/// Every man page: `rsskit.8`, then one per visible subcommand at any depth
/// (`rsskit-plan.8`, `rsskit-bench-toeplitz.8`), as (file name, roff text).
pub fn man_pages() -> Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = crate::Cli::command();
    // Building gives subcommands their display names (`rsskit-plan`).
    cmd.build();
    let source = format!("rsskit {}", env!("CARGO_PKG_VERSION"));
    let mut pages = Vec::new();
    // Every page the SUBCOMMANDS sections name exists: clap's `help`
    // subcommands get one too, but their own subcommands (`help plan`,
    // mirrors of the real ones) do not.
    fn walk(
        cmd: &clap::Command,
        source: &str,
        recurse: bool,
        pages: &mut Vec<(String, Vec<u8>)>,
    ) -> Result<()> {
        let man = clap_mangen::Man::new(cmd.clone()).section(SECTION).manual(MANUAL).source(source);
        let mut text = Vec::new();
        man.render(&mut text).context("rendering a man page")?;
        if !recurse {
            // A `help` page without the SUBCOMMANDS section: it would name
            // pages (`rsskit-help-plan`) that mirror the real ones and are
            // not generated.
            text = without_section(&String::from_utf8_lossy(&text), "SUBCOMMANDS").into_bytes();
        }
        pages.push((man.get_filename(), text));
        if recurse {
            for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                walk(sub, source, sub.get_name() != "help", pages)?;
            }
        }
        Ok(())
    }
    walk(&cmd, &source, true, &mut pages)?;
    Ok(pages)
}

/// `roff` without the section `.SH NAME` up to the next `.SH`.
fn without_section(roff: &str, name: &str) -> String {
    let head = format!(".SH {name}\n");
    let Some(start) = roff.find(&head) else { return roff.to_owned() };
    let rest = &roff[start + head.len()..];
    let end = rest.find(".SH ").map_or(roff.len(), |i| start + head.len() + i);
    format!("{}{}", &roff[..start], &roff[end..])
}

pub fn run_completions(args: CompletionsArgs) -> Result<()> {
    use std::io::Write;
    std::io::stdout().write_all(&completion_script(args.shell)).context("writing to stdout")
}

pub fn run_gen_docs(args: GenDocsArgs) -> Result<()> {
    let pages = man_pages()?;
    for (name, text) in &pages {
        write_new(&args.man, name, text)?;
    }
    for (shell, name) in PACKAGED_SHELLS {
        write_new(&args.completions, name, &completion_script(shell))?;
    }
    println!(
        "wrote {} man pages to {} and {} completion scripts to {}",
        pages.len(),
        args.man.display(),
        PACKAGED_SHELLS.len(),
        args.completions.display()
    );
    Ok(())
}

/// Writes `dir/name`; `name` comes from the clap definitions, never from input,
/// but is still refused if it could leave `dir`.
fn write_new(dir: &Path, name: &str, text: &[u8]) -> Result<()> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        bail!("refusing to write generated file named {name:?}");
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}
