//! `nimbus broker verify`: reads the embedded broker's log offline, as open
//! would, and reports each file, changing nothing (decision 0130).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use nimbus_broker::{Finding, Verification};
use nimbus_runtime::{BROKER_DIR, DataLock, DataLockError};

use crate::cli::{BrokerCommand, VerifyArgs};
use crate::output::{EXIT_ERROR, errln, outln};

pub(crate) fn run(command: &BrokerCommand) -> anyhow::Result<ExitCode> {
    match command {
        BrokerCommand::Verify(args) => verify(args),
    }
}

fn verify(args: &VerifyArgs) -> anyhow::Result<ExitCode> {
    let data_dir = match &args.data_dir {
        Some(dir) => dir.clone(),
        None => super::run::load_offline(args.config.as_deref())?
            .0
            .config
            .host
            .data_dir
            .clone(),
    };
    // The broker's own directory is taken too: it is what the broker's
    // errors name.
    let (data_dir, broker_dir) =
        if data_dir.join(BROKER_DIR).is_dir() || !data_dir.join(nimbus_broker::LOG_DIR).is_dir() {
            let broker_dir = data_dir.join(BROKER_DIR);
            (data_dir, broker_dir)
        } else {
            let host_dir = data_dir
                .parent()
                .map_or_else(PathBuf::new, Path::to_path_buf);
            (host_dir, data_dir)
        };
    // Held while the files are read: a host starting meanwhile would
    // repair and compact them under the reader.
    let _lock = match DataLock::take_to_read(&data_dir) {
        Ok(lock) => lock,
        Err(DataLockError::InUse { dir, holder }) => anyhow::bail!(
            "a nimbus host is running on {} ({holder}): stop it first; the log is checked \
             only while no host writes it",
            dir.display()
        ),
        Err(error) => {
            return Err(error)
                .with_context(|| format!("cannot check the broker log of {}", data_dir.display()));
        }
    };
    let verification = nimbus_broker::verify(&broker_dir);
    print(&verification);
    match &verification.outcome {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(error) => {
            errln!("error: {error}");
            Ok(ExitCode::from(EXIT_ERROR))
        }
    }
}

fn print(verification: &Verification) {
    outln!("broker log {}", verification.log_dir.display());
    let name = |path: &Path| {
        path.strip_prefix(&verification.log_dir)
            .unwrap_or(path)
            .display()
            .to_string()
    };
    let width = verification
        .files
        .iter()
        .map(|f| name(&f.path).len())
        .max()
        .unwrap_or(0);
    for file in &verification.files {
        outln!("  {:<width$}  {}", name(&file.path), file.finding);
    }
    match &verification.outcome {
        Ok(live) => {
            let repairs = verification
                .files
                .iter()
                .filter(|f| !matches!(f.finding, Finding::Whole { .. }))
                .count();
            outln!(
                "sound: {} topics, {} subscriptions, {} messages, {} scheduled{}",
                live.topics,
                live.subscriptions,
                live.messages,
                live.scheduled,
                match repairs {
                    0 => String::new(),
                    n => format!("; the next open repairs {n} file(s) as noted above"),
                }
            );
        }
        Err(_) => outln!("refused: `nimbus run` would not start on this log"),
    }
}
