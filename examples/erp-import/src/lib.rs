//! `erp-import`: hands `ErpImportRequested` events off to a long-running ERP
//! import job (think Dynamics DMF) and returns a **pending handoff**.
//!
//! The event stays pending, and its session blocked, until the external
//! system or an operator settles it (`HandoffCompletedRequest` /
//! `HandoffFailedRequest`); the handler is never run again for it. Payload:
//!
//! ```json
//! {"ImportId":"imp-42","Entity":"Customers","Rows":1200}
//! ```
//!
//! The external job id is derived from the event id (`dmf-{event id}`), so a
//! retry or a replay of the same event reports the same job. The expected
//! duration comes from the config key `expected_minutes` (default 30).

use std::time::Duration;

use nimbus_guest::{Context, Error, Event, Handler, Outcome, pending_handoff};
use serde::Deserialize;

/// The payload of an `ErpImportRequested` event.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ErpImportRequested {
    /// The caller's id for the import.
    pub import_id: String,
    /// The ERP entity to import, e.g. `Customers`.
    pub entity: String,
    /// How many rows the import carries.
    pub rows: u64,
}

impl Event for ErpImportRequested {
    const EVENT_TYPE: &'static str = "ErpImportRequested";
}

/// How long an import is expected to take when the config does not say.
const DEFAULT_EXPECTED_MINUTES: u64 = 30;

/// Starts ERP imports and hands the events off.
pub struct ErpImport;

impl Handler<ErpImportRequested> for ErpImport {
    fn handle(&self, import: ErpImportRequested, ctx: &Context) -> Result<Outcome, Error> {
        let minutes = ctx
            .config_parse::<u64>("expected_minutes")?
            .unwrap_or(DEFAULT_EXPECTED_MINUTES);
        let job_id = format!("dmf-{}", ctx.event_id());
        nimbus_guest::info!(ctx, {
            import_id: import.import_id,
            entity: import.entity,
            rows: import.rows,
            job_id: job_id,
        }, "ERP import {} started", import.import_id);
        Ok(pending_handoff(format!(
            "DMF import of {} {} rows in flight",
            import.rows, import.entity
        ))
        .external_job_id(job_id)
        .expected_within(Duration::from_secs(minutes.saturating_mul(60)))
        .into())
    }
}

nimbus_guest::export!(ErpImport => ErpImportRequested);

#[cfg(test)]
mod tests;
