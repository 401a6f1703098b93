//! `nimbus handlers check` and `nimbus handlers list`.

use std::process::ExitCode;

use anyhow::Context as _;
use nimbus_sandbox::Registry;

use crate::cli::{CheckArgs, ListArgs};
use crate::output::{self, errln, out};

pub(crate) fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    if args.file.is_dir() {
        anyhow::bail!(
            "{} is a directory: `handlers check` takes one component file (.wasm); \
             `nimbus handlers list --handlers DIR` lists a handlers directory",
            args.file.display()
        );
    }
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
    // A deploy's pre-check: it passes only if a host starting here would
    // serve every handler, and some.
    let failed = snapshot.handlers().filter(|h| h.serving.is_none()).count();
    if failed > 0 {
        errln!(
            "error: {failed} handler{} in {} do{} not load (see above)",
            if failed == 1 { "" } else { "s" },
            args.handlers.display(),
            if failed == 1 { "es" } else { "" }
        );
        return Ok(ExitCode::FAILURE);
    }
    if snapshot.handlers().next().is_none() {
        errln!(
            "error: no handler in {}: a component goes in <dir>/<endpoint>/<handler>.wasm",
            args.handlers.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
