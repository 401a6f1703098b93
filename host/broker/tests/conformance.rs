//! The transport conformance suite, run against the embedded broker on a
//! temporary directory with a manual clock.

use std::time::{Duration, SystemTime};

use nimbus_broker::{Broker, BrokerOptions, Clock, Durability, ManualClock};
use nimbus_transport::conformance::Harness;

struct Embedded {
    broker: Broker,
    clock: ManualClock,
    dir: tempfile::TempDir,
}

fn options(dir: &std::path::Path, clock: &ManualClock) -> BrokerOptions {
    BrokerOptions::new(dir)
        .durability(Durability::Fsync)
        .clock(std::sync::Arc::new(clock.clone()))
}

async fn harness() -> Embedded {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = ManualClock::at_fixed_start();
    let broker = Broker::open(options(dir.path(), &clock))
        .await
        .expect("open broker");
    Embedded { broker, clock, dir }
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
        let Embedded { broker, clock, dir } = self;
        drop(broker);
        let broker = Broker::open(options(dir.path(), &clock))
            .await
            .expect("reopen broker");
        Some(Embedded { broker, clock, dir })
    }
}

nimbus_transport::transport_conformance!(harness);
