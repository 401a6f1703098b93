//! `nimbus invoke`: one event through the sandbox, result as JSON.

use std::io::Read as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use nimbus_handler::{Delivery, Event};
use nimbus_sandbox::{HandlerVersion, Registry, Snapshot};
use nimbus_transport::PropertyValue;

use crate::cli::InvokeArgs;
use crate::output;

/// Exit code when the handler ran and returned an error.
const EXIT_HANDLER_ERROR: u8 = 3;

pub(crate) fn run(args: &InvokeArgs) -> anyhow::Result<ExitCode> {
    // As the API refuses them on a publish: the host never hands a handler
    // a NimBus envelope name as a user property.
    if let Some((name, _)) = args
        .properties
        .iter()
        .find(|(name, _)| nimbus_wire::prop::is_envelope(name))
    {
        bail!("--property {name}: a NimBus envelope property, set by nimbus; choose another name");
    }
    let payload = read_payload(&args.data)?;
    if let Err(error) = serde_json::from_str::<serde::de::IgnoredAny>(&payload) {
        bail!("--data is not valid JSON: {error}");
    }
    if args.handlers.is_file() {
        bail!(
            "--handlers {} is a file: give the handlers directory it is in, laid out as \
             DIR/<endpoint>/<handler>.wasm (for one component: mkdir -p h/ep && cp {} h/ep/, then \
             --handlers h)",
            args.handlers.display(),
            args.handlers.display()
        );
    }
    let sandbox = super::sandbox(&args.cache)?;
    let registry = Registry::open(sandbox, &args.handlers)
        .with_context(|| format!("cannot open handlers directory {}", args.handlers.display()))?;
    let snapshot = registry.snapshot();
    let (endpoint, version) = select(&snapshot, &args.event_type, args.endpoint.as_deref())?;
    let event = build_event(args, payload);
    // The yielding call, as the host makes it: its deadline also cuts off a
    // handler waiting inside a WASI call (a sleep), which a synchronous
    // call's epoch check never sees, so `invoke` would wait for ever.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .context("cannot start a runtime to run the handler")?;
    let invocation = runtime.block_on(version.invoke_async(event));
    let failed = invocation.report.result.is_err();
    output::print_json(&output::InvocationView::new(&endpoint, &invocation))?;
    Ok(if failed {
        ExitCode::from(EXIT_HANDLER_ERROR)
    } else {
        ExitCode::SUCCESS
    })
}

fn read_payload(data: &str) -> anyhow::Result<String> {
    match data.strip_prefix('@') {
        Some("-") => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read the payload from stdin")?;
            Ok(text)
        }
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the payload file {path}")),
        None => Ok(data.to_owned()),
    }
}

/// The version that handles `event_type`, in `endpoint` if given.
fn select(
    snapshot: &Snapshot,
    event_type: &str,
    endpoint: Option<&str>,
) -> anyhow::Result<(String, Arc<HandlerVersion>)> {
    if let Some(endpoint) = endpoint {
        if !snapshot.endpoints().any(|e| e == endpoint) {
            let known: Vec<&str> = snapshot.endpoints().collect();
            bail!(
                "no endpoint `{endpoint}` in the handlers directory ({})",
                if known.is_empty() {
                    "it has none".to_owned()
                } else {
                    format!("endpoints: {}", known.join(", "))
                }
            );
        }
        return match snapshot.lookup(endpoint, event_type) {
            Some(version) => Ok((endpoint.to_owned(), Arc::clone(version))),
            None => bail!(
                "no handler for event type `{event_type}` in endpoint `{endpoint}`{}",
                known_types_hint(snapshot, Some(endpoint))
            ),
        };
    }
    match snapshot.endpoints_for(event_type).as_slice() {
        [] => bail!(
            "no handler for event type `{event_type}`{}",
            known_types_hint(snapshot, None)
        ),
        [endpoint] => {
            let version = snapshot
                .lookup(endpoint, event_type)
                .context("registry changed while selecting the handler")?;
            Ok(((*endpoint).to_owned(), Arc::clone(version)))
        }
        several => bail!(
            "event type `{event_type}` is handled in several endpoints ({}): pass --endpoint",
            several.join(", ")
        ),
    }
}

fn known_types_hint(snapshot: &Snapshot, endpoint: Option<&str>) -> String {
    let mut known: Vec<String> = snapshot
        .endpoints()
        .filter(|e| endpoint.is_none_or(|wanted| wanted == *e))
        .flat_map(|e| {
            snapshot
                .event_types(e)
                .into_iter()
                .map(move |t| format!("{e}/{t}"))
        })
        .collect();
    known.dedup();
    let failed: Vec<String> = snapshot
        .handlers()
        .filter_map(|s| s.last_error.as_ref().map(|e| format!("{}: {e}", s.key)))
        .collect();
    let mut hint = if known.is_empty() {
        match endpoint {
            Some(_) => "; the endpoint serves no event types".to_owned(),
            None => "; the directory serves no event types".to_owned(),
        }
    } else {
        format!("; known: {}", known.join(", "))
    };
    if !failed.is_empty() {
        hint.push_str(&format!(
            "; handlers that failed to load: {}",
            failed.join("; ")
        ));
    }
    hint
}

fn build_event(args: &InvokeArgs, payload: String) -> Event {
    let now = SystemTime::now();
    let now_ms = now
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let event_id = args
        .event_id
        .clone()
        .unwrap_or_else(|| format!("invoke-{now_ms}-{}", std::process::id()));
    let (message_type, from) = args.message_type.wire();
    Event {
        message_id: event_id.clone(),
        session_id: args.session.clone().unwrap_or_else(|| event_id.clone()),
        event_id,
        event_type: args.event_type.clone(),
        correlation_id: args.correlation_id.clone(),
        parent_message_id: None,
        originating_message_id: None,
        retry_count: args.retry_count,
        enqueued_time: now,
        payload,
        // A publish's properties are a map: a name given twice keeps its
        // last value, as the message would.
        properties: args
            .properties
            .iter()
            .map(|(name, value)| (name.clone(), PropertyValue::String(value.clone())))
            .collect(),
        delivery: Delivery {
            count: args.delivery_count,
            message_type,
            from: from.map(str::to_owned),
        },
    }
}
