//! `nimbus handlers check` and `nimbus handlers list`.

use std::process::ExitCode;

use anyhow::Context as _;
use nimbus_sandbox::Registry;

use crate::cli::{CheckArgs, ListArgs};
use crate::output::{self, out};

pub(crate) fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    if !args.file.is_file() {
        anyhow::bail!("{}: no such component file", args.file.display());
    }
    let sandbox = super::sandbox(&args.cache)?;
    let version = sandbox
        .load_file(&args.file)
        .with_context(|| format!("{} is not a valid handler", args.file.display()))?;
    let view = output::VersionView::new(&version, Some(&args.file));
    if args.json {
        output::print_json(&view)?;
    } else {
        out!("{}", view.text());
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn list(args: &ListArgs) -> anyhow::Result<ExitCode> {
    let sandbox = super::sandbox(&args.cache)?;
    let registry = Registry::open(sandbox, &args.handlers)
        .with_context(|| format!("cannot open handlers directory {}", args.handlers.display()))?;
    let snapshot = registry.snapshot();
    let view = output::ListView::new(&snapshot);
    if args.json {
        output::print_json(&view)?;
    } else {
        out!("{}", view.text());
    }
    Ok(ExitCode::SUCCESS)
}
