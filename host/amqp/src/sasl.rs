//! SASL: the SDKs authenticate on `$cbs` after the connection opens, not in
//! SASL, so both mechanisms they use are offered and taken: `ANONYMOUS`
//! (Python, which refuses a server that does not list it) and `MSSBCBS`
//! (.NET's name for the same). Anything else is refused.

use fe2o3_amqp::acceptor::sasl_acceptor::{SaslAcceptor, SaslServerFrame};
use fe2o3_amqp::types::primitives::{Array, Symbol};
use fe2o3_amqp::types::sasl::{SaslCode, SaslInit, SaslOutcome, SaslResponse};

const OFFERED: [&str; 2] = ["MSSBCBS", "ANONYMOUS"];

/// Offers `MSSBCBS` and `ANONYMOUS`, and takes either.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ServiceBusSasl;

impl SaslAcceptor for ServiceBusSasl {
    fn mechanisms(&self) -> Array<Symbol> {
        Array(OFFERED.iter().map(|m| Symbol::from(*m)).collect())
    }

    fn on_init(&mut self, init: SaslInit) -> SaslServerFrame {
        let code = if OFFERED.contains(&init.mechanism.as_str()) {
            SaslCode::Ok
        } else {
            SaslCode::Auth
        };
        SaslServerFrame::Outcome(SaslOutcome {
            code,
            additional_data: None,
        })
    }

    fn on_response(&mut self, _response: SaslResponse) -> SaslServerFrame {
        // Neither mechanism has a challenge to answer.
        SaslServerFrame::Outcome(SaslOutcome {
            code: SaslCode::Auth,
            additional_data: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(mechanism: &str) -> SaslCode {
        let init = SaslInit {
            mechanism: Symbol::from(mechanism),
            initial_response: None,
            hostname: None,
        };
        match ServiceBusSasl.on_init(init) {
            SaslServerFrame::Outcome(outcome) => outcome.code,
            SaslServerFrame::Challenge(_) => panic!("no mechanism here challenges"),
        }
    }

    #[test]
    fn the_sdks_mechanisms_are_offered_and_taken_and_others_refused() {
        let offered: Vec<String> = ServiceBusSasl
            .mechanisms()
            .0
            .into_iter()
            .map(|m| m.0)
            .collect();
        assert_eq!(offered, ["MSSBCBS", "ANONYMOUS"]);
        assert_eq!(outcome("ANONYMOUS"), SaslCode::Ok);
        assert_eq!(outcome("MSSBCBS"), SaslCode::Ok);
        assert_eq!(outcome("PLAIN"), SaslCode::Auth);
    }
}
