//! Group commit for the consumer: observations from every session worker
//! queue here and are recorded in batches, one store transaction each.
//!
//! A worker submits the records of every message of its session it has in
//! hand as one run ([`Recorder::submit`]), and settles each message only
//! after the run's answer came back, so nothing is completed before it is
//! durable. A batch takes whole runs, so the runs of concurrent sessions
//! share a commit (and its fsync). While one batch commits, the next one
//! gathers.
//!
//! Order: the queue is FIFO and a run is recorded in its order, so a
//! session's records reach the store in the order the worker received them.
//! When a batch fails and is recorded again one by one, a run stops at its
//! first failure: the later records of that run are not attempted, so none
//! can be recorded ahead of an earlier message of its session. A worker may
//! submit its session's next run before the last one is answered; the runs
//! of one session hold share a [`Chain`], and once a run of a chain fails,
//! the chain's later runs are not attempted either.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{mpsc, oneshot};

use crate::observation::Observation;
use crate::store::{Recorded, ResolverStore, StoreError};

/// The outcome of one record; `None` when it was not attempted because an
/// earlier record of its run failed.
pub(crate) type Answer = Option<Result<Recorded, StoreError>>;

/// One session's records, in order, and where to send their answers.
struct Run {
    observations: Vec<Observation>,
    chain: Chain,
    reply: oneshot::Sender<Vec<Answer>>,
}

/// The runs one worker submits for one hold of a session, in order: once
/// one fails (a record failed, or was not attempted), the later ones are
/// answered without being attempted, so no record of the session is made
/// ahead of one that failed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Chain(Arc<AtomicBool>);

impl Chain {
    fn broken(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    fn snap(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A run queued for commit: await [`Submitted::committed`] for its answers.
pub(crate) struct Submitted(oneshot::Receiver<Vec<Answer>>);

impl Submitted {
    /// One answer per record of the run, in order, once its transaction
    /// ended.
    pub(crate) async fn committed(self) -> Result<Vec<Answer>, StoreError> {
        self.0
            .await
            .map_err(|_| StoreError::Panicked("the recorder dropped a run".to_owned()))
    }
}

/// The sending side: cheap to share between workers.
#[derive(Clone)]
pub(crate) struct Recorder {
    runs: mpsc::Sender<Run>,
}

impl Recorder {
    /// Starts the recording thread; a batch takes whole runs until it holds
    /// at least `max_batch` records. The thread ends when every `Recorder`
    /// clone is dropped.
    ///
    /// One long-lived thread rather than a blocking-pool task per batch:
    /// the store's connection, its page cache and the allocator's pages stay
    /// warm on one thread, and no pool thread is woken or spawned per batch.
    pub(crate) fn start(store: Arc<dyn ResolverStore>, max_batch: usize) -> Recorder {
        let max_batch = max_batch.max(1);
        let (runs, queue) = mpsc::channel(max_batch);
        let spawned = std::thread::Builder::new()
            .name("nimbus-recorder".to_owned())
            .spawn(move || run(&*store, queue, max_batch));
        if let Err(e) = spawned {
            // The queue's receiver is gone with the closure: every submit
            // reports that the recorder stopped, and the consumer abandons.
            tracing::error!(error = %e, "resolver: the recording thread did not start");
        }
        Recorder { runs }
    }

    /// Queues a run of records (waiting only while the queue is full) and
    /// returns the handle to its answers.
    pub(crate) async fn submit(
        &self,
        observations: Vec<Observation>,
        chain: &Chain,
    ) -> Result<Submitted, StoreError> {
        let (reply, answers) = oneshot::channel();
        self.runs
            .send(Run {
                observations,
                chain: chain.clone(),
                reply,
            })
            .await
            .map_err(|_| StoreError::Panicked("the recorder stopped".to_owned()))?;
        Ok(Submitted(answers))
    }

    /// Records `observation` on its own and waits for its commit.
    #[cfg(test)]
    pub(crate) async fn record(&self, observation: Observation) -> Result<Recorded, StoreError> {
        let answers = self
            .submit(vec![observation], &Chain::default())
            .await?
            .committed()
            .await?;
        answers
            .into_iter()
            .next()
            .flatten()
            .unwrap_or_else(|| Err(StoreError::Panicked("no answer".to_owned())))
    }
}

fn run(store: &dyn ResolverStore, mut queue: mpsc::Receiver<Run>, max_batch: usize) {
    while let Some(first) = queue.blocking_recv() {
        let mut records = first.observations.len();
        let mut runs = vec![first];
        while records < max_batch {
            match queue.try_recv() {
                Ok(next) => {
                    records += next.observations.len();
                    runs.push(next);
                }
                Err(_) => break,
            }
        }
        let mut work = Vec::with_capacity(runs.len());
        let mut chains = Vec::with_capacity(runs.len());
        let mut replies = Vec::with_capacity(runs.len());
        for run in runs {
            // A run behind a failed one of its chain is not attempted.
            if run.chain.broken() {
                let _ = run
                    .reply
                    .send(run.observations.iter().map(|_| None).collect());
                continue;
            }
            work.push(run.observations);
            chains.push(run.chain);
            replies.push(run.reply);
        }
        if work.is_empty() {
            continue;
        }
        let lengths: Vec<usize> = work.iter().map(Vec::len).collect();
        // A panicking store must not take the thread, and with it every
        // later record, down: the batch is answered with the panic.
        let answers = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            commit(store, work, &chains)
        }))
        .unwrap_or_else(|panic| {
            let why = panic_message(panic.as_ref());
            lengths
                .iter()
                .map(|&n| {
                    (0..n)
                        .map(|_| Some(Err(StoreError::Panicked(why.clone()))))
                        .collect()
                })
                .collect()
        });
        for ((reply, answers), chain) in replies.into_iter().zip(answers).zip(chains) {
            if !answers.iter().all(|a| matches!(a, Some(Ok(_)))) {
                chain.snap();
            }
            // A worker that stopped waiting has nothing to settle.
            let _ = reply.send(answers);
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the store panicked".to_owned())
}

/// Records a batch of runs in one transaction; if that fails, each record
/// on its own, so one bad observation cannot fail the others (except the
/// later records of its own run, and the later runs of its chain, which are
/// not attempted).
fn commit(
    store: &dyn ResolverStore,
    runs: Vec<Vec<Observation>>,
    chains: &[Chain],
) -> Vec<Vec<Answer>> {
    let lengths: Vec<usize> = runs.iter().map(Vec::len).collect();
    let all: Vec<Observation> = runs.into_iter().flatten().collect();
    let error = match store.record_batch(&all) {
        Ok(outcomes) => {
            let mut outcomes = outcomes.into_iter();
            return lengths
                .iter()
                .map(|&n| outcomes.by_ref().take(n).map(|o| Some(Ok(o))).collect())
                .collect();
        }
        Err(error) => error,
    };
    if all.len() == 1 {
        return vec![vec![Some(Err(error))]];
    }
    tracing::warn!(%error, batch = all.len(), "resolver: batch failed; recording one by one");
    let mut observations = all.iter();
    lengths
        .iter()
        .zip(chains)
        .map(|(&n, chain)| {
            let mut failed = chain.broken();
            let answers: Vec<Answer> = observations
                .by_ref()
                .take(n)
                .map(|observation| {
                    if failed {
                        return None;
                    }
                    let result = store.record(observation);
                    failed = result.is_err();
                    Some(result)
                })
                .collect();
            if failed {
                chain.snap();
            }
            answers
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::SqliteResolverStore;
    use crate::status::{MessageKind, Status};
    use crate::store::{EventDetail, EventFilter, EventRecord, Heartbeat};

    /// A store whose single records fail for one event id, and whose
    /// batches always fail (or, with `batches_fail` false, record one by one
    /// up to the first failure, as the trait's default does).
    struct BatchesFail {
        inner: SqliteResolverStore,
        poisoned: &'static str,
        batches_fail: bool,
    }

    impl ResolverStore for BatchesFail {
        fn record(&self, observation: &Observation) -> Result<Recorded, StoreError> {
            assert!(observation.event_id != "panics", "the store blew up");
            if observation.event_id == self.poisoned {
                return Err(StoreError::Corrupt("poisoned".into()));
            }
            self.inner.record(observation)
        }
        fn record_batch(&self, batch: &[Observation]) -> Result<Vec<Recorded>, StoreError> {
            if self.batches_fail {
                return Err(StoreError::Corrupt("batch failed".into()));
            }
            batch.iter().map(|o| self.record(o)).collect()
        }
        fn event(&self, event_id: &str) -> Result<Vec<EventDetail>, StoreError> {
            self.inner.event(event_id)
        }
        fn events_of_message(&self, message_id: &str) -> Result<Vec<EventDetail>, StoreError> {
            self.inner.events_of_message(message_id)
        }
        fn events(&self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError> {
            self.inner.events(filter)
        }
        fn refused_writes(&self) -> u64 {
            0
        }
        fn record_heartbeat(&self, heartbeat: &Heartbeat) -> Result<(), StoreError> {
            self.inner.record_heartbeat(heartbeat)
        }
        fn heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
            self.inner.heartbeats()
        }
    }

    fn request(event_id: &str) -> Observation {
        let mut o = Observation::new("billing", event_id, MessageKind::EventRequest, 1);
        o.message_id = Some(format!("m-{event_id}"));
        o
    }

    const PENDING: Recorded = Recorded::Applied {
        status: Status::Pending,
    };

    fn runs(runs: &[&[&str]]) -> Vec<Vec<Observation>> {
        runs.iter()
            .map(|run| run.iter().map(|id| request(id)).collect())
            .collect()
    }

    /// `n` chains of their own.
    fn chains(n: usize) -> Vec<Chain> {
        (0..n).map(|_| Chain::default()).collect()
    }

    /// A store whose records of `bad` fail; see [`BatchesFail`].
    fn failing_at_bad(batches_fail: bool) -> BatchesFail {
        BatchesFail {
            inner: SqliteResolverStore::open_in_memory().unwrap(),
            poisoned: "bad",
            batches_fail,
        }
    }

    /// The answers to one run of `ids`, submitted on `chain`.
    async fn answers_of(recorder: &Recorder, ids: &[&str], chain: &Chain) -> Vec<Answer> {
        recorder
            .submit(runs(&[ids]).remove(0), chain)
            .await
            .unwrap()
            .committed()
            .await
            .unwrap()
    }

    #[test]
    fn a_failed_run_stops_the_later_runs_of_its_chain_in_the_same_batch() {
        let store = failing_at_bad(true);
        let session = Chain::default();
        let other = Chain::default();
        let answers = commit(
            &store,
            runs(&[&["a", "bad"], &["x"], &["b"]]),
            &[session.clone(), other.clone(), session.clone()],
        );
        assert!(
            matches!(
                answers[0][..],
                [Some(Ok(PENDING)), Some(Err(StoreError::Corrupt(_)))]
            ),
            "{answers:?}"
        );
        assert!(matches!(answers[1][..], [Some(Ok(PENDING))]), "{answers:?}");
        assert!(matches!(answers[2][..], [None]), "{answers:?}");
        assert!(store.event("b").unwrap().is_empty(), "not attempted");
        assert!(session.broken() && !other.broken());
    }

    /// A worker submits its session's next run before the last is
    /// answered: once one failed, the next is not attempted, so nothing of
    /// the session is recorded ahead of the failed record.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_behind_a_failed_one_of_its_chain_is_not_attempted() {
        let store = Arc::new(failing_at_bad(false));
        let recorder = Recorder::start(Arc::clone(&store) as Arc<dyn ResolverStore>, 16);
        let session = Chain::default();
        let failed = answers_of(&recorder, &["bad"], &session).await;
        assert!(
            matches!(failed[..], [Some(Err(StoreError::Corrupt(_)))]),
            "{failed:?}"
        );
        let behind = answers_of(&recorder, &["c", "d"], &session).await;
        assert!(matches!(behind[..], [None, None]), "{behind:?}");
        assert!(store.event("c").unwrap().is_empty(), "not attempted");
        // Another hold of the session (a new chain) records again.
        let again = answers_of(&recorder, &["c"], &Chain::default()).await;
        assert!(matches!(again[..], [Some(Ok(PENDING))]), "{again:?}");
    }

    #[test]
    fn a_failed_batch_falls_back_to_one_by_one_so_only_the_bad_one_fails() {
        let store = failing_at_bad(true);
        let answers = commit(&store, runs(&[&["a"], &["bad"], &["b"]]), &chains(3));
        assert!(matches!(answers[0][..], [Some(Ok(PENDING))]), "{answers:?}");
        assert!(
            matches!(answers[1][..], [Some(Err(StoreError::Corrupt(_)))]),
            "{answers:?}"
        );
        assert!(matches!(answers[2][..], [Some(Ok(PENDING))]), "{answers:?}");
        assert_eq!(store.event("b").unwrap().len(), 1);
    }

    #[test]
    fn a_failure_stops_its_run_but_not_the_other_runs() {
        let store = failing_at_bad(true);
        let answers = commit(
            &store,
            runs(&[&["a", "bad", "b", "c"], &["x", "y"]]),
            &chains(2),
        );
        assert!(
            matches!(
                answers[0][..],
                [
                    Some(Ok(PENDING)),
                    Some(Err(StoreError::Corrupt(_))),
                    None,
                    None
                ]
            ),
            "{answers:?}"
        );
        assert!(
            matches!(answers[1][..], [Some(Ok(PENDING)), Some(Ok(PENDING))]),
            "{answers:?}"
        );
        assert_eq!(store.event("a").unwrap().len(), 1);
        assert!(store.event("b").unwrap().is_empty(), "not attempted");
        assert!(store.event("c").unwrap().is_empty(), "not attempted");
        assert_eq!(store.event("y").unwrap().len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_is_answered_in_order_and_stops_at_its_first_failure() {
        let store = Arc::new(failing_at_bad(false));
        let recorder = Recorder::start(Arc::clone(&store) as Arc<dyn ResolverStore>, 16);
        let fine = recorder
            .submit(runs(&[&["a", "b", "c"]]).remove(0), &Chain::default())
            .await
            .unwrap();
        let failing = recorder
            .submit(runs(&[&["d", "bad", "e"]]).remove(0), &Chain::default())
            .await
            .unwrap();
        // Both runs may share the batch that fails; the trait's default
        // batch records up to the failure, so the retry one by one may find
        // the earlier records already there.
        let fine = fine.committed().await.unwrap();
        assert!(
            matches!(fine[..], [Some(Ok(_)), Some(Ok(_)), Some(Ok(_))]),
            "{fine:?}"
        );
        let failing = failing.committed().await.unwrap();
        assert!(
            matches!(
                failing[..],
                [Some(Ok(_)), Some(Err(StoreError::Corrupt(_))), None]
            ),
            "{failing:?}"
        );
        assert!(store.event("e").unwrap().is_empty(), "not attempted");
        for recorded in ["a", "b", "c", "d"] {
            assert_eq!(store.event(recorded).unwrap().len(), 1, "{recorded}");
        }
    }

    /// A store that panics answers its batch with the panic; the recording
    /// thread lives on and records the next run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_store_fails_its_batch_and_the_recorder_goes_on() {
        let store = Arc::new(BatchesFail {
            inner: SqliteResolverStore::open_in_memory().unwrap(),
            poisoned: "none",
            batches_fail: false,
        });
        let recorder = Recorder::start(Arc::clone(&store) as Arc<dyn ResolverStore>, 16);
        let blown = answers_of(&recorder, &["panics"], &Chain::default()).await;
        assert!(
            matches!(&blown[..], [Some(Err(StoreError::Panicked(why)))] if why.contains("the store blew up")),
            "{blown:?}"
        );
        assert_eq!(recorder.record(request("after")).await.unwrap(), PENDING);
        assert_eq!(store.event("after").unwrap().len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_records_each_get_their_own_answer() {
        let store = Arc::new(SqliteResolverStore::open_in_memory().unwrap());
        let recorder = Recorder::start(Arc::clone(&store) as Arc<dyn ResolverStore>, 16);
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..100 {
            let recorder = recorder.clone();
            tasks.spawn(async move { (i, recorder.record(request(&format!("e{i}"))).await) });
        }
        let mut answered = 0;
        while let Some(joined) = tasks.join_next().await {
            let (i, result) = joined.unwrap();
            assert_eq!(
                result.unwrap(),
                Recorded::Applied {
                    status: Status::Pending
                },
                "e{i}"
            );
            answered += 1;
        }
        assert_eq!(answered, 100);
        let all = store.events(&EventFilter::default()).unwrap();
        assert_eq!(all.len(), 100);
        // Recording the same message again is recognised, through a batch too.
        assert_eq!(
            recorder.record(request("e7")).await.unwrap(),
            Recorded::AlreadyRecorded
        );
    }
}
