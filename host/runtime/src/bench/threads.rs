//! The process's CPU split by thread, from `/proc/self/task` (Linux; empty
//! elsewhere): which part of the stack an event's CPU goes to, and which
//! thread of its own would saturate first. The Resolver's recorder is one
//! thread, so its share caps the stack's throughput however many cores the
//! rest may use (decision 0122).

use std::collections::HashMap;
use std::time::Duration;

/// What each thread had used at one moment: task id to (name, CPU time).
#[derive(Debug, Default)]
pub(crate) struct ThreadCpu(HashMap<u64, (String, Duration)>);

/// The CPU one group of threads used per event in a phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadShare {
    /// The group: `tokio workers`, `Resolver recorder`, `broker writer`, ...
    pub group: &'static str,
    /// CPU per event.
    pub per_event: Duration,
}

/// The busiest thread of those that do one job each (not the tokio pool,
/// whose work moves between its threads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusiestThread {
    /// The thread's name, as the kernel keeps it (15 bytes at most).
    pub name: String,
    /// CPU per event.
    pub per_event: Duration,
}

impl BusiestThread {
    /// The events/s at which this thread alone would be busy all the time.
    pub fn saturates_at(&self) -> Option<f64> {
        let secs = self.per_event.as_secs_f64();
        (secs > 0.0).then(|| 1.0 / secs)
    }
}

/// Every thread's CPU now.
pub(crate) fn snapshot() -> ThreadCpu {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return ThreadCpu::default();
    };
    let threads = tasks
        .filter_map(Result::ok)
        .filter_map(|task| {
            let tid = task.file_name().to_str()?.parse().ok()?;
            let name = std::fs::read_to_string(task.path().join("comm")).ok()?;
            let schedstat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
            Some((tid, (name.trim_end().to_owned(), on_cpu(&schedstat)?)))
        })
        .collect();
    ThreadCpu(threads)
}

/// The time on CPU in a `schedstat` line (its first field, nanoseconds).
fn on_cpu(schedstat: &str) -> Option<Duration> {
    schedstat
        .split_whitespace()
        .next()?
        .parse()
        .ok()
        .map(Duration::from_nanos)
}

/// Which group a thread's work belongs to, by its name.
fn group(name: &str) -> &'static str {
    const GROUPS: [(&str, &str); 6] = [
        // `tokio-rt-worker`, or `tokio-runtime-worker` cut to 15 bytes, as
        // tokio's versions name them; its blocking threads share the name.
        ("tokio-", "tokio workers"),
        ("nimbus-recorder", "Resolver recorder"),
        // "nimbus-resolver-ckpt", as the kernel cuts it.
        ("nimbus-resolver", "Resolver checkpointer"),
        ("nimbus-broker-w", "broker writer"),
        ("nimbus-broker-c", "broker compactor"),
        ("nimbus-epoch", "epoch ticker"),
    ];
    GROUPS
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map_or("other", |(_, group)| group)
}

/// Per event of `events`, what each group used between `before` and
/// `after` (largest first, empty groups left out), and the busiest thread
/// outside the tokio pool. A thread that started in between counts from
/// zero; one that ended in between is not counted.
pub(crate) fn split(
    before: &ThreadCpu,
    after: &ThreadCpu,
    events: u32,
) -> (Vec<ThreadShare>, Option<BusiestThread>) {
    if events == 0 {
        return (Vec::new(), None);
    }
    let mut groups: Vec<(&'static str, Duration)> = Vec::new();
    let mut busiest: Option<(&str, Duration)> = None;
    for (tid, (name, now)) in &after.0 {
        let then = before
            .0
            .get(tid)
            .filter(|(earlier_name, _)| earlier_name == name)
            .map_or(Duration::ZERO, |(_, cpu)| *cpu);
        let used = now.saturating_sub(then);
        let group = group(name);
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, total)) => *total += used,
            None => groups.push((group, used)),
        }
        if group != "tokio workers" && busiest.is_none_or(|(_, most)| used > most) {
            busiest = Some((name, used));
        }
    }
    groups.retain(|(_, used)| !used.is_zero());
    groups.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let shares = groups
        .into_iter()
        .map(|(group, used)| ThreadShare {
            group,
            per_event: used / events,
        })
        .collect();
    let busiest = busiest
        .filter(|(_, used)| !used.is_zero())
        .map(|(name, used)| BusiestThread {
            name: name.to_owned(),
            per_event: used / events,
        });
    (shares, busiest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(threads: &[(u64, &str, u64)]) -> ThreadCpu {
        ThreadCpu(
            threads
                .iter()
                .map(|&(tid, name, ms)| (tid, (name.to_owned(), Duration::from_millis(ms))))
                .collect(),
        )
    }

    #[test]
    fn a_phase_is_split_by_group_per_event_and_names_the_busiest_own_thread() {
        let before = cpu(&[
            (1, "tokio-rt-worker", 100),
            (2, "tokio-rt-worker", 100),
            (3, "nimbus-recorder", 50),
            (4, "nimbus-broker-w", 10),
            (5, "nimbus-resolver", 5),
            (6, "nimbus-log", 1),
        ]);
        let after = cpu(&[
            (1, "tokio-rt-worker", 600),
            (2, "tokio-rt-worker", 500),
            (3, "nimbus-recorder", 450),
            (4, "nimbus-broker-w", 90),
            (5, "nimbus-resolver", 5),
            // Started during the phase: all of it counts.
            (7, "nimbus-broker-c", 20),
        ]);
        let (shares, busiest) = split(&before, &after, 1000);
        assert_eq!(
            shares,
            [
                ("tokio workers", 900),
                ("Resolver recorder", 400),
                ("broker writer", 80),
                ("broker compactor", 20),
            ]
            .map(|(group, us)| ThreadShare {
                group,
                per_event: Duration::from_micros(us),
            })
        );
        // The tokio workers used more each, but their work moves between them.
        let busiest = busiest.expect("a busiest thread");
        assert_eq!(busiest.name, "nimbus-recorder");
        assert_eq!(busiest.per_event, Duration::from_micros(400));
        assert_eq!(busiest.saturates_at(), Some(2500.0));
    }

    #[test]
    fn a_reused_task_id_counts_as_a_new_thread() {
        let before = cpu(&[(3, "nimbus-load", 500)]);
        let after = cpu(&[(3, "nimbus-recorder", 40)]);
        let (shares, _) = split(&before, &after, 10);
        assert_eq!(shares[0].group, "Resolver recorder");
        assert_eq!(shares[0].per_event, Duration::from_millis(4));
    }

    #[test]
    fn no_events_no_split() {
        let after = cpu(&[(3, "nimbus-recorder", 40)]);
        assert_eq!(split(&ThreadCpu::default(), &after, 0), (Vec::new(), None));
    }

    #[test]
    fn this_process_threads_are_read_on_linux() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinning = std::sync::Arc::clone(&stop);
        let spinner = std::thread::Builder::new()
            .name("nimbus-recorder".to_owned())
            .spawn(move || {
                while !spinning.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
            .expect("spawn");
        std::thread::sleep(Duration::from_millis(50));
        let now = snapshot();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spinner.join().expect("join");
        // Other tests run threads in this process too: look for this one's
        // group only.
        let (shares, _) = split(&ThreadCpu::default(), &now, 1);
        let recorder = shares
            .iter()
            .find(|s| s.group == "Resolver recorder")
            .unwrap_or_else(|| panic!("the spinning thread is not read: {shares:?}"));
        // It spun ~50 ms, less what the machine gave others.
        assert!(
            recorder.per_event >= Duration::from_millis(5),
            "{recorder:?}"
        );
    }
}
