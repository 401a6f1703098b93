//! The transport conformance suite, run against the embedded broker on a
//! temporary directory with a manual clock, at both durability levels.

use std::time::{Duration, SystemTime};

use nimbus_broker::{Broker, BrokerOptions, Clock, Durability, ManualClock};
use nimbus_transport::conformance::Harness;

struct Embedded {
    broker: Broker,
    clock: ManualClock,
    dir: tempfile::TempDir,
    durability: Durability,
}

fn options(dir: &std::path::Path, clock: &ManualClock, durability: Durability) -> BrokerOptions {
    BrokerOptions::new(dir)
        .durability(durability)
        .clock(std::sync::Arc::new(clock.clone()))
}

async fn harness(durability: Durability) -> Embedded {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = ManualClock::at_fixed_start();
    let broker = Broker::open(options(dir.path(), &clock, durability))
        .await
        .expect("open broker");
    Embedded {
        broker,
        clock,
        dir,
        durability,
    }
}

impl Harness for Embedded {
    type Transport = Broker;

    fn transport(&self) -> &Broker {
        &self.broker
    }

    fn advance(&self, by: Duration) -> bool {
        self.clock.advance(by);
        true
    }

    fn now(&self) -> SystemTime {
        self.clock.now()
    }

    async fn restart(self) -> Option<Self> {
        let Embedded {
            broker,
            clock,
            dir,
            durability,
        } = self;
        drop(broker);
        let broker = Broker::open(options(dir.path(), &clock, durability))
            .await
            .expect("reopen broker");
        Some(Embedded {
            broker,
            clock,
            dir,
            durability,
        })
    }
}

mod fsync {
    async fn harness() -> super::Embedded {
        super::harness(super::Durability::Fsync).await
    }
    nimbus_transport::transport_conformance!(harness);
}

mod os {
    async fn harness() -> super::Embedded {
        super::harness(super::Durability::Os).await
    }
    nimbus_transport::transport_conformance!(harness);
}
