//! Group commit for the consumer: observations from every session worker
//! queue here and are recorded in batches, one store transaction each.
//!
//! Each worker still waits for its own message's commit before settling it,
//! so nothing is completed before it is durable; batching only lets
//! concurrent sessions share a commit (and its fsync). While one batch
//! commits, the next one gathers.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::observation::Observation;
use crate::store::{Recorded, ResolverStore, StoreError};

type Reply = oneshot::Sender<Result<Recorded, StoreError>>;

/// The sending side: cheap to share between workers.
#[derive(Clone)]
pub(crate) struct Recorder {
    jobs: mpsc::Sender<(Observation, Reply)>,
}

impl Recorder {
    /// Starts the batching task on the current runtime. It ends when every
    /// `Recorder` clone is dropped.
    pub(crate) fn start(store: Arc<dyn ResolverStore>, max_batch: usize) -> Recorder {
        let max_batch = max_batch.max(1);
        let (jobs, queue) = mpsc::channel(max_batch.saturating_mul(4));
        tokio::spawn(run(store, queue, max_batch));
        Recorder { jobs }
    }

    /// Records `observation` and waits for its commit.
    pub(crate) async fn record(&self, observation: Observation) -> Result<Recorded, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send((observation, reply))
            .await
            .map_err(|_| StoreError::Panicked("the recorder stopped".to_owned()))?;
        answer
            .await
            .map_err(|_| StoreError::Panicked("the recorder dropped a message".to_owned()))?
    }
}

async fn run(
    store: Arc<dyn ResolverStore>,
    mut queue: mpsc::Receiver<(Observation, Reply)>,
    max_batch: usize,
) {
    let mut batch = Vec::with_capacity(max_batch);
    while queue.recv_many(&mut batch, max_batch).await > 0 {
        let (observations, replies): (Vec<_>, Vec<_>) =
            std::mem::take(&mut batch).into_iter().unzip();
        let store = Arc::clone(&store);
        let results = tokio::task::spawn_blocking(move || commit(&*store, &observations))
            .await
            .unwrap_or_else(|join| replies_failed(replies.len(), &join.to_string()));
        for (reply, result) in replies.into_iter().zip(results) {
            // A worker that stopped waiting has nothing to settle.
            let _ = reply.send(result);
        }
    }
}

/// Records a batch in one transaction; if that fails, each observation on
/// its own, so one bad observation cannot fail the others.
fn commit(
    store: &dyn ResolverStore,
    observations: &[Observation],
) -> Vec<Result<Recorded, StoreError>> {
    match store.record_batch(observations) {
        Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
        Err(error) if observations.len() == 1 => vec![Err(error)],
        Err(error) => {
            tracing::warn!(%error, batch = observations.len(), "resolver: batch failed; recording one by one");
            observations.iter().map(|o| store.record(o)).collect()
        }
    }
}

fn replies_failed(n: usize, why: &str) -> Vec<Result<Recorded, StoreError>> {
    (0..n)
        .map(|_| Err(StoreError::Panicked(why.to_owned())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::SqliteResolverStore;
    use crate::status::{MessageKind, Status};
    use crate::store::{EventDetail, EventFilter, EventRecord, Heartbeat};

    /// A store whose batches always fail, and whose single records fail for
    /// one event id.
    struct BatchesFail {
        inner: SqliteResolverStore,
        poisoned: &'static str,
    }

    impl ResolverStore for BatchesFail {
        fn record(&self, observation: &Observation) -> Result<Recorded, StoreError> {
            if observation.event_id == self.poisoned {
                return Err(StoreError::Corrupt("poisoned".into()));
            }
            self.inner.record(observation)
        }
        fn record_batch(&self, _: &[Observation]) -> Result<Vec<Recorded>, StoreError> {
            Err(StoreError::Corrupt("batch failed".into()))
        }
        fn event(&self, event_id: &str) -> Result<Vec<EventDetail>, StoreError> {
            self.inner.event(event_id)
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

    #[test]
    fn a_failed_batch_falls_back_to_one_by_one_so_only_the_bad_one_fails() {
        let store = BatchesFail {
            inner: SqliteResolverStore::open_in_memory().unwrap(),
            poisoned: "bad",
        };
        let results = commit(&store, &[request("a"), request("bad"), request("b")]);
        assert!(matches!(
            results[0],
            Ok(Recorded::Applied {
                status: Status::Pending
            })
        ));
        assert!(matches!(results[1], Err(StoreError::Corrupt(_))));
        assert!(matches!(
            results[2],
            Ok(Recorded::Applied {
                status: Status::Pending
            })
        ));
        assert_eq!(store.event("b").unwrap().len(), 1);
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
