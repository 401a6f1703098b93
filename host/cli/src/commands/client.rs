//! The client commands: each one request to the running host's HTTP API,
//! printed as a table (or text) for people, or as the API's JSON with
//! `--json` for scripts.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::api_client::{ApiClient, path_segment};
use crate::cli::Command;
use crate::cli_ops::{ApiArgs, BulkArgs, DlqCommand, DlqTargetArgs, HandoffCommand};
use crate::output::{errln, out, outln, print_json};

pub(crate) fn run(api: &ApiArgs, command: Command) -> anyhow::Result<ExitCode> {
    let client = ApiClient::new(api)?;
    match command {
        Command::Publish(args) => {
            let data = json_arg("--data", &args.data)?;
            let answer = client.post(
                "/api/publish",
                &PublishBody {
                    event_type: &args.event_type,
                    data: &data,
                    session_id: args.session.as_deref(),
                    correlation_id: args.correlation_id.as_deref(),
                    message_id: args.message_id.as_deref(),
                    from: args.from.as_deref(),
                    properties: (!args.properties.is_empty()).then(|| {
                        args.properties
                            .iter()
                            .map(|(name, value)| (name.as_str(), value.as_str()))
                            .collect()
                    }),
                },
            )?;
            if args.json {
                print_json(&answer)?;
            } else {
                outln!("{}", text(&answer["message_id"]));
                publish_note(&args.event_type, &answer);
            }
        }
        Command::Events(args) => {
            let listing = client.listing(
                "/api/events",
                &[
                    ("endpoint", args.endpoint),
                    ("status", args.status),
                    ("session", args.session),
                    ("limit", args.limit.map(|n| n.to_string())),
                ],
            )?;
            let events = &listing.value;
            if args.json {
                print_json(events)?;
            } else {
                out!("{}", events_table(events));
            }
            // A listing cut at its limit looks like a complete one: say so.
            if listing.truncated.is_some() {
                let shown = events.as_array().map_or(0, Vec::len);
                errln!(
                    "note: more events match than the {shown} shown (most recently updated \
                     first); --limit N shows more"
                );
            }
        }
        Command::Event(args) => {
            let event = client.get(&format!("/api/events/{}", path_segment(&args.id)), &[])?;
            if args.json {
                print_json(&event)?;
            } else {
                out!("{}", event_text(&event));
            }
        }
        Command::Resubmit(args) => {
            let Some(id) = args.id.as_deref().filter(|_| !args.bulk.all) else {
                return on_failed(&client, "resubmit", args.endpoint, args.bulk, args.json);
            };
            let data = args
                .data
                .as_deref()
                .map(|d| json_arg("--data", d))
                .transpose()?;
            let sent = client.post(
                &operation_path(id, "resubmit"),
                &ResubmitBody {
                    endpoint: args.endpoint.as_deref(),
                    data: data.as_deref(),
                },
            )?;
            print_sent(&sent, args.json)?;
        }
        Command::Endpoints(args) => {
            let endpoints = client.get("/api/endpoints", &[])?;
            if args.json {
                print_json(&endpoints)?;
            } else {
                out!("{}", endpoints_table(&endpoints));
            }
        }
        Command::Pause(args) => switch_endpoint(&client, &args.endpoint, "pause", args.json)?,
        Command::Resume(args) => switch_endpoint(&client, &args.endpoint, "resume", args.json)?,
        Command::Skip(args) => {
            let Some(id) = args.id.as_deref().filter(|_| !args.bulk.all) else {
                return on_failed(&client, "skip", args.endpoint, args.bulk, args.json);
            };
            let sent = client.post(
                &operation_path(id, "skip"),
                &json!({ "endpoint": args.endpoint }),
            )?;
            print_sent(&sent, args.json)?;
        }
        Command::Handoff(HandoffCommand::Complete(args)) => {
            let details = args
                .details
                .as_deref()
                .map(|d| json_arg("--details", d))
                .transpose()?;
            let sent = client.post(
                &operation_path(&args.id, "handoff/complete"),
                &HandoffCompleteBody {
                    endpoint: args.endpoint.as_deref(),
                    details: details.as_deref(),
                },
            )?;
            print_sent(&sent, args.json)?;
        }
        Command::Handoff(HandoffCommand::Fail(args)) => {
            let sent = client.post(
                &operation_path(&args.id, "handoff/fail"),
                &json!({
                    "endpoint": args.endpoint,
                    "error": args.error,
                    "error_type": args.error_type,
                }),
            )?;
            print_sent(&sent, args.json)?;
        }
        Command::Sessions(args) => {
            let blocked_only = args.blocked;
            let sessions = client.get(
                "/api/sessions",
                &[
                    ("endpoint", args.endpoint),
                    ("blocked", blocked_only.then(|| "true".to_owned())),
                ],
            )?;
            if args.json {
                print_json(&sessions)?;
            } else {
                out!("{}", sessions_table(&sessions, blocked_only));
            }
        }
        Command::Dlq(DlqCommand::List(args)) => {
            let listing = client.listing(
                "/api/dlq",
                &[
                    ("endpoint", args.endpoint),
                    ("limit", args.limit.map(|n| n.to_string())),
                ],
            )?;
            let listed = &listing.value;
            if args.json {
                print_json(listed)?;
            } else {
                out!("{}", dead_letters_table(listed));
            }
            // A listing cut at its limit looks like a complete one: say so.
            for endpoint in listing
                .truncated
                .iter()
                .flat_map(|t| t.split(','))
                .map(str::trim)
                .filter(|e| !e.is_empty())
            {
                let shown = listed
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|d| d["endpoint"] == endpoint)
                    .count();
                errln!(
                    "note: {endpoint} has more dead-lettered messages than the {shown} shown; \
                     --limit N shows more"
                );
            }
        }
        Command::Dlq(DlqCommand::Replay(args)) => {
            let answer = client.post(
                "/api/dlq/replay",
                &dlq_body(args.target, ("all", args.all), args.force),
            )?;
            if args.json {
                print_json(&answer)?;
            } else {
                let replayed = answer["replayed"].as_array().map_or(0, Vec::len);
                let left: Vec<&Value> = answer["left"].as_array().into_iter().flatten().collect();
                // A table of nothing ("no dead-lettered messages") beside
                // messages left in place would contradict them.
                if replayed > 0 || left.is_empty() {
                    outln!("replayed {replayed} dead-lettered message(s)");
                }
                if replayed > 0 {
                    out!("{}", dead_letters_table(&answer["replayed"]));
                }
                for left in &left {
                    errln!(
                        "left in place: {}{}",
                        text(&left["why"]),
                        left_hint(left["reason"].as_str().unwrap_or_default())
                    );
                }
                if !left.is_empty() {
                    outln!("replayed {replayed}, left {} (see above)", left.len());
                }
            }
            // A pass that stopped part-way has moved some messages (they
            // may be running): said even with --json, and not a success.
            if let Some(stopped) = answer["stopped"].as_str() {
                errln!(
                    "error: the replay stopped part-way, after replaying {} message(s): {stopped}",
                    answer["replayed"].as_array().map_or(0, Vec::len)
                );
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Dlq(DlqCommand::Remove(args)) => {
            let answer = client.post(
                "/api/dlq/remove",
                &dlq_body(args.target, ("settled", args.settled), args.force),
            )?;
            if args.json {
                print_json(&answer)?;
            } else {
                let removed = answer["removed"].as_array().map_or(0, Vec::len);
                let kept: Vec<&Value> = answer["kept"].as_array().into_iter().flatten().collect();
                // As for a replay: one summary, the last line, when some
                // were kept.
                if removed > 0 || kept.is_empty() {
                    outln!("removed {removed} dead-lettered message(s)");
                }
                if removed > 0 {
                    out!("{}", dead_letters_table(&answer["removed"]));
                }
                for kept in &kept {
                    errln!(
                        "kept: {}{}",
                        text(&kept["why"]),
                        left_hint(kept["reason"].as_str().unwrap_or_default())
                    );
                }
                if !kept.is_empty() {
                    outln!("removed {removed}, kept {} (see above)", kept.len());
                }
            }
            if let Some(stopped) = answer["stopped"].as_str() {
                errln!(
                    "error: the removal stopped part-way, after removing {} message(s): {stopped}",
                    answer["removed"].as_array().map_or(0, Vec::len)
                );
                return Ok(ExitCode::FAILURE);
            }
        }
        other => bail!("{other:?} is not a client command"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `nimbus handlers` (no subcommand): the running host's handlers.
pub(crate) fn handlers(api: &ApiArgs, as_json: bool) -> anyhow::Result<ExitCode> {
    let client = ApiClient::new(api)?;
    let handlers = client.get("/api/handlers", &[])?;
    if as_json {
        print_json(&handlers)?;
    } else {
        out!("{}", handlers_table(&handlers));
    }
    Ok(ExitCode::SUCCESS)
}

fn operation_path(id: &str, operation: &str) -> String {
    format!("/api/events/{}/{operation}", path_segment(id))
}

/// A JSON argument given inline or as `@file` (`@-` for stdin).
/// `POST /api/publish`, with the data as written.
#[derive(serde::Serialize)]
struct PublishBody<'a> {
    event_type: &'a str,
    data: &'a RawValue,
    session_id: Option<&'a str>,
    correlation_id: Option<&'a str>,
    message_id: Option<&'a str>,
    from: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    properties: Option<std::collections::BTreeMap<&'a str, &'a str>>,
}

/// `nimbus resubmit --all` and `nimbus skip --all`: one request, then
/// what was chosen and sent (or with `--dry-run`, what would be), the
/// events left out and why, and notes. Not a success when anything chosen
/// was not sent.
fn on_failed(
    client: &ApiClient,
    operation: &str,
    endpoint: Option<String>,
    bulk: BulkArgs,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let answer = client.post(
        &format!("/api/failed/{operation}"),
        &json!({
            "endpoint": endpoint,
            "session": bulk.session,
            "event_type": bulk.event_type,
            "error_type": bulk.error_type,
            "not_updated_for": bulk.older_than,
            "include_awaiting_retry": bulk.include_awaiting_retry,
            "limit": bulk.limit,
            "dry_run": bulk.dry_run,
        }),
    )?;
    let not_sent = answer["not_sent"].as_array().map_or(0, Vec::len);
    if as_json {
        print_json(&answer)?;
    } else {
        let (text, notes) = on_failed_text(operation, &answer);
        out!("{text}");
        for note in notes {
            errln!("{note}");
        }
    }
    Ok(if not_sent > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The text of a bulk operation's answer (the events and a summary line),
/// and the lines for stderr: what was not sent or left out, and notes.
fn on_failed_text(operation: &str, answer: &Value) -> (String, Vec<String>) {
    let list = |key: &str| answer[key].as_array().cloned().unwrap_or_default();
    let (chosen, sent, not_sent, awaiting) = (
        list("chosen"),
        list("sent"),
        list("not_sent"),
        list("awaiting_retry"),
    );
    let dry_run = answer["dry_run"].as_bool().unwrap_or(false);
    let past = if operation == "skip" {
        "skipped"
    } else {
        "resubmitted"
    };
    let mut out = String::new();
    if chosen.is_empty() {
        out.push_str("no Failed event matches\n");
    } else {
        let rows: Vec<Vec<String>> = chosen
            .iter()
            .map(|c| {
                vec![
                    text(&c["event_id"]),
                    text(&c["endpoint"]),
                    text(&c["session_id"]),
                    text(&c["event_type"]),
                    time_ms(&c["updated_ms"]),
                    text(&c["error_type"]),
                ]
            })
            .collect();
        out.push_str(&table(
            &["EVENT", "ENDPOINT", "SESSION", "TYPE", "FAILED", "ERROR"],
            &rows,
        ));
        if dry_run {
            let _ = writeln!(
                out,
                "dry run: would {operation} {} event(s); nothing was sent",
                chosen.len()
            );
        } else {
            let _ = writeln!(out, "{past} {} of {} event(s)", sent.len(), chosen.len());
        }
    }
    let mut notes: Vec<String> = not_sent
        .iter()
        .map(|left| {
            let line = format!(
                "not sent: event {} at {}: {}",
                text(&left["event_id"]),
                text(&left["endpoint"]),
                text(&left["error"])
            );
            crate::escape::for_cell(&line).into_owned()
        })
        .collect();
    if !awaiting.is_empty() {
        notes.push(format!(
            "left out: {} event(s) whose session waits for a scheduled retry (the retry runs \
             them; --include-awaiting-retry to {operation} them too)",
            awaiting.len()
        ));
    }
    if answer["more"].as_bool().unwrap_or(false) {
        notes.push(
            "note: more Failed events may match than this pass took; run it again once these \
             have settled (or raise --limit)"
                .to_owned(),
        );
    }
    for note in answer["notes"].as_array().into_iter().flatten() {
        notes.push(format!("note: {}", text(note)));
    }
    (out, notes)
}

/// `nimbus pause E` / `nimbus resume E`: one line saying what the
/// endpoint is now, and whether this changed it.
fn switch_endpoint(
    client: &ApiClient,
    endpoint: &str,
    action: &str,
    as_json: bool,
) -> anyhow::Result<()> {
    let state = client.post(
        &format!("/api/endpoints/{}/{action}", path_segment(endpoint)),
        &json!({}),
    )?;
    if as_json {
        return print_json(&state);
    }
    let name = text(&state["endpoint"]);
    let already = if state["changed"] == true {
        ""
    } else {
        " (it already was)"
    };
    if state["paused"] == true {
        outln!(
            "endpoint {name} is paused since {}{already}: it takes no sessions and its events \
             wait in its queue until `nimbus resume {name}`",
            time_ms(&state["paused_since_ms"])
        );
    } else {
        outln!("endpoint {name} is running{already}");
    }
    Ok(())
}

fn endpoints_table(endpoints: &Value) -> String {
    let rows: Vec<Vec<String>> = endpoints
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let state = if e["paused"] == true {
                format!("paused since {}", time_ms(&e["paused_since_ms"]))
            } else {
                "running".to_owned()
            };
            vec![text(&e["endpoint"]), state]
        })
        .collect();
    if rows.is_empty() {
        return "no endpoints\n".to_owned();
    }
    table(&["ENDPOINT", "STATE"], &rows)
}

/// `POST .../resubmit`, with the edited data as written.
#[derive(serde::Serialize)]
struct ResubmitBody<'a> {
    endpoint: Option<&'a str>,
    data: Option<&'a RawValue>,
}

/// `POST .../handoff/complete`, with the details as written.
#[derive(serde::Serialize)]
struct HandoffCompleteBody<'a> {
    endpoint: Option<&'a str>,
    details: Option<&'a RawValue>,
}

/// The JSON of `--data`, checked but kept as written: a parsed value would
/// round large numbers and decimals through f64 and reorder keys.
fn json_arg(flag: &str, value: &str) -> anyhow::Result<Box<RawValue>> {
    let text = match value.strip_prefix('@') {
        Some("-") => std::io::read_to_string(std::io::stdin())
            .with_context(|| format!("reading {flag} from stdin"))?,
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {flag} from {path}"))?
        }
        None => value.to_owned(),
    };
    RawValue::from_string(text).with_context(|| format!("{flag} is not valid JSON"))
}

/// The control message an operator action sent: one line (and its notes
/// on stderr), or with `json` the API's answer as it is.
fn print_sent(sent: &Value, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(sent);
    }
    // One line each, whatever the event id a publisher chose holds.
    let line = format!(
        "sent {} {} for event {} at {}",
        text(&sent["message_type"]),
        text(&sent["message_id"]),
        text(&sent["event_id"]),
        text(&sent["endpoint"])
    );
    outln!("{}", crate::escape::for_cell(&line));
    for note in sent["notes"].as_array().into_iter().flatten() {
        errln!("note: {}", crate::escape::for_cell(&text(note)));
    }
    Ok(())
}

/// A JSON value as plain text; `-` for null.
fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Milliseconds since the epoch as RFC 3339 (seconds).
fn time_ms(value: &Value) -> String {
    match value.as_u64() {
        Some(ms) => {
            humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
        }
        None => text(value),
    }
}

/// The short form of a version digest (hex), as `git` shortens commits.
/// A version for a table: the first 12 hex digits of its digest (`sha256:`
/// dropped), and its settings suffix (`+…`) if it has one, which is what
/// tells a manifest-only fix from the version before it.
fn short_version(value: &Value) -> String {
    let full = text(value);
    let bare = full.strip_prefix("sha256:").unwrap_or(&full);
    let (digest, settings) = match bare.split_once('+') {
        Some((digest, settings)) => (digest, Some(settings)),
        None => (bare, None),
    };
    let mut short: String = digest.chars().take(12).collect();
    if let Some(settings) = settings {
        short.push('+');
        short.push_str(settings);
    }
    short
}

/// Rows under a header, columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    // A cell holds what a publisher or handler chose; it must stay one line
    // of its column, whatever it holds.
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| crate::escape::for_cell(cell).into_owned())
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, (cell, &width)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}  ");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in &rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// An event record's status as every listing shows it: `Pending/Handoff`
/// for a status with a sub-status, as `--status` takes it.
fn status_text(record: &Value) -> String {
    let status = text(&record["status"]);
    match record["sub_status"].as_str() {
        Some(sub) => format!("{status}/{sub}"),
        None => status,
    }
}

fn events_table(events: &Value) -> String {
    let now = SystemTime::now();
    let rows: Vec<Vec<String>> = events
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let mut status = status_text(e);
            if let Some(late) = overdue(&e["expected_by"], now) {
                let _ = write!(status, " (overdue {late})");
            }
            if e["waiting_for_handler"].is_string() {
                status.push_str(" (waiting: no handler serves; see nimbus event)");
            }
            if e["endpoint_paused_since_ms"].is_i64() && e["status"] == "Pending" {
                status.push_str(" (waiting: endpoint paused)");
            }
            let failing = &e["transient_failure"];
            if let Some(delivery) = failing["delivery"].as_u64() {
                let _ = write!(
                    status,
                    " (retrying: delivery {delivery} of {} failed)",
                    text(&failing["max_deliveries"])
                );
            }
            let error_type = match failing["error_type"].as_str() {
                Some(transient) if e["error_type"].is_null() => transient.to_owned(),
                _ => text(&e["error_type"]),
            };
            vec![
                text(&e["event_id"]),
                text(&e["endpoint"]),
                text(&e["session_id"]),
                status,
                text(&e["event_type"]),
                text(&e["retry_count"]),
                time_ms(&e["updated_ms"]),
                error_type,
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no events\n".to_owned();
    }
    table(
        &[
            "EVENT", "ENDPOINT", "SESSION", "STATUS", "TYPE", "RETRIES", "UPDATED", "ERROR",
        ],
        &rows,
    )
}

fn event_text(event: &Value) -> String {
    let mut out = String::new();
    if let Some(message_id) = event["message_id"].as_str() {
        let count = event["endpoints"].as_array().map_or(0, Vec::len);
        let _ = writeln!(
            out,
            "message {} belongs to {count} event{}:\n",
            crate::escape::for_cell(message_id),
            if count == 1 { "" } else { "s" }
        );
    }
    for at in event["endpoints"].as_array().into_iter().flatten() {
        let r = &at["record"];
        let mut status = status_text(r);
        // Only a Failed event that blocks its session carries these.
        match (at["awaits_retry"].as_bool(), at["retry_at"].as_str()) {
            (Some(true), Some(retry_at)) => {
                status.push_str(&retry_note(retry_at, SystemTime::now()));
            }
            (Some(false), _) => status.push_str(", no retry left: resubmit or skip it"),
            _ => {}
        }
        let mut line = |label: &str, value: &str| detail_line(&mut out, label, value);
        line("event", &text(&r["event_id"]));
        line("endpoint", &text(&r["endpoint"]));
        line("status", &status);
        if let Some(retrying) = transient_line(&at["transient_failure"]) {
            line("retrying", &retrying);
        }
        if let Some(why) = at["waiting_for_handler"].as_str() {
            line("waiting", why);
        }
        if !at["endpoint_paused_since_ms"].is_null() {
            line(
                "paused",
                &format!(
                    "its endpoint is paused since {}: nothing of it runs until `nimbus resume {}`",
                    time_ms(&at["endpoint_paused_since_ms"]),
                    text(&r["endpoint"])
                ),
            );
        }
        line("type", &text(&r["event_type"]));
        line("session", &text(&r["session_id"]));
        line("correlation", &text(&r["correlation_id"]));
        line("handler", &text(&r["handler_version"]));
        line("retries", &text(&r["retry_count"]));
        match (r["error_type"].as_str(), r["error_text"].as_str()) {
            (Some(error_type), Some(error_text)) => {
                line("error", &format!("{error_type}: {error_text}"));
            }
            // A skip's reason (`DuplicateDetected`, a discard's) is text
            // with no error type: not an error with a blank type.
            (None, Some(reason)) => line("reason", reason),
            (Some(error_type), None) => line("error", error_type),
            (None, None) => {}
        }
        if !r["dead_letter_reason"].is_null() {
            let reason = text(&r["dead_letter_reason"]);
            let description = text(&r["dead_letter_description"]);
            // A permanent failure's reason already ends with its text.
            if reason.ends_with(&description) {
                line("dead-letter", &reason);
            } else {
                line("dead-letter", &format!("{reason}: {description}"));
            }
        }
        if !r["external_job_id"].is_null() {
            let late = overdue(&r["expected_by"], SystemTime::now())
                .map(|late| format!(", overdue by {late}"))
                .unwrap_or_default();
            line(
                "handoff",
                &format!(
                    "job {} (expected by {}{late}): {}",
                    text(&r["external_job_id"]),
                    text(&r["expected_by"]),
                    text(&r["handoff_reason"])
                ),
            );
        }
        line("payload", &text(&r["payload"]));
        // The published message's user properties (a resubmission carries
        // them again); most events have none.
        if let Some(properties) = r["properties"].as_str() {
            line("properties", properties);
        }
        let _ = writeln!(out, "history:");
        let rows: Vec<Vec<String>> = at["history"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| {
                // The error as `type: text`, as the event's own error line
                // shows it: the type is what a classifier rule matches.
                let error = match (h["error_type"].as_str(), h["error_text"].as_str()) {
                    (Some(kind), Some(text)) => Some(format!("{kind}: {text}")),
                    (Some(kind), None) => Some(kind.to_owned()),
                    (None, Some(text)) => Some(text.to_owned()),
                    (None, None) => None,
                };
                let mut note = match (handoff_note(&h["handoff"]), error) {
                    (Some(handoff), Some(error)) => format!("{handoff}; {error}"),
                    (Some(handoff), None) => handoff,
                    (None, Some(error)) => error,
                    (None, None) => "-".to_owned(),
                };
                if let Some(before) = h["replaced_payload"].as_str() {
                    let edited = format!("payload edited; before: {}", one_line(before));
                    note = if note == "-" {
                        edited
                    } else {
                        format!("{edited}; {note}")
                    };
                }
                if let Some(refused) = h["refused"].as_str() {
                    note = format!("(refused: {refused}) {note}");
                }
                vec![
                    time_ms(&h["at_ms"]),
                    text(&h["message_type"]),
                    text(&h["status"]),
                    text(&h["from"]),
                    text(&h["retry_count"]),
                    short_version(&h["handler_version"]),
                    note,
                ]
            })
            .collect();
        // The last column is what the message said beyond its type: its
        // error, what it said about a handoff, why its write was refused.
        out.push_str(&table(
            &[
                "AT", "MESSAGE", "STATUS", "FROM", "RETRY", "HANDLER", "NOTE",
            ],
            &rows,
        ));
        out.push('\n');
    }
    out
}

/// One line of `nimbus event`'s detail view: `label`, then `value` in the
/// value column, written out as a table cell is (newline and tab too).
/// Much of it (session and event ids, types, error texts, properties) is
/// what a publisher or handler chose, and a newline in it would start a
/// line that reads as another field, a forged status say (issue 40).
fn detail_line(out: &mut String, label: &str, value: &str) {
    let _ = writeln!(out, "{label:<11} {}", crate::escape::for_cell(value));
}

/// Why a Pending event is still pending when the host is delivering it
/// again after a transient failure (the Resolver is sent nothing for one):
/// `delivery 2 of 10 failed transiently at 15:14:22Z (Timeout: partner
/// down); next delivery after 15:14:27Z`.
fn transient_line(failure: &Value) -> Option<String> {
    let delivery = failure["delivery"].as_u64()?;
    let error_type = text(&failure["error_type"]);
    let mut error = text(&failure["error"]);
    if !error_type.is_empty() && error_type != "-" {
        error = format!("{error_type}: {error}");
    }
    Some(format!(
        "delivery {delivery} of {} failed transiently at {} ({}); next delivery after {}",
        text(&failure["max_deliveries"]),
        clock_time(&text(&failure["failed_at"])),
        one_line(&error),
        clock_time(&text(&failure["next_delivery_after"])),
    ))
}

/// How much of a handoff's details the history table shows; `--json` has
/// them whole.
const DETAILS_SHOWN: usize = 200;

/// What a history entry said about a handoff, on one line: the job a
/// `PendingHandoffResponse` named (`job dmf-1 (expected by …): reason`),
/// the details a `HandoffCompletedRequest` carried (`details {…}`).
fn handoff_note(handoff: &Value) -> Option<String> {
    let mut note = String::new();
    if let Some(job) = handoff["external_job_id"].as_str() {
        let _ = write!(note, "job {job}");
    }
    if let Some(by) = handoff["expected_by"].as_str() {
        let space = if note.is_empty() { "" } else { " " };
        let _ = write!(note, "{space}(expected by {by})");
    }
    if let Some(reason) = handoff["reason"].as_str() {
        let colon = if note.is_empty() { "" } else { ": " };
        let _ = write!(note, "{colon}{reason}");
    }
    if let Some(details) = handoff["details"].as_str() {
        let semicolon = if note.is_empty() { "" } else { "; " };
        let _ = write!(note, "{semicolon}details {}", one_line(details));
    }
    (!note.is_empty()).then_some(note)
}

/// How long past its expected-by time a handoff in flight is, at `now`,
/// to the second (to the minute past an hour): an external job that has
/// not reported by then may be stuck, and the operator may have to ask
/// its system, or fail the handoff. `None` when not past, or no time.
fn overdue(expected_by: &Value, now: SystemTime) -> Option<String> {
    let expected = humantime::parse_rfc3339_weak(expected_by.as_str()?).ok()?;
    let late = now.duration_since(expected).ok()?.as_secs();
    if late == 0 {
        return None;
    }
    let shown = if late >= 3600 { late - late % 60 } else { late };
    Some(humantime::format_duration(Duration::from_secs(shown)).to_string())
}

/// JSON a peer or an operator sent, for one table cell: one line (a row is
/// one line, whatever was sent), cut at [`DETAILS_SHOWN`] characters
/// (`--json` has it whole).
fn one_line(json: &str) -> String {
    let flat: String = json.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut shown: String = flat.chars().take(DETAILS_SHOWN).collect();
    if shown.len() < flat.len() {
        shown.push('…');
    }
    shown
}

/// The sessions as a table; `blocked_only` when the listing asked for
/// blocked sessions only, so an empty one says no more than it knows.
fn sessions_table(sessions: &Value, blocked_only: bool) -> String {
    let rows: Vec<Vec<String>> = sessions
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            vec![
                text(&s["endpoint"]),
                text(&s["session_id"]),
                blocker_cell(s),
                parked_cell(s),
                text(&s["active_messages"]),
                if s["locked"] == true { "yes" } else { "no" }.to_owned(),
            ]
        })
        .collect();
    if rows.is_empty() {
        return if blocked_only {
            "no session is blocked\n"
        } else {
            "no session is blocked, has parked events or holds messages\n"
        }
        .to_owned();
    }
    table(
        &[
            "ENDPOINT",
            "SESSION",
            "BLOCKED BY",
            "PARKED",
            "MESSAGES",
            "LOCKED",
        ],
        &rows,
    )
}

/// The blocking event, why it blocks, and whether a retry is coming:
/// `e-1 (Failed, retry at 15:14:22Z)` can wait; `e-1 (Failed, no retry)`
/// needs an operator.
fn blocker_cell(session: &Value) -> String {
    let blocked_by = text(&session["blocked_by"]);
    let Some(status) = session["blocker_status"].as_str() else {
        return blocked_by;
    };
    let retry = match (
        session["awaits_retry"].as_bool(),
        session["retry_at"].as_str(),
    ) {
        (Some(true), Some(at)) => retry_note(at, SystemTime::now()),
        (Some(false), _) if status == "Failed" => ", no retry".to_owned(),
        _ => String::new(),
    };
    format!("{blocked_by} ({status}{retry})")
}

/// When the retry a block waits for is due: `, retry at 15:14:22Z`, or,
/// once that time has passed at `now`, `, retry due since 15:14:22Z`. A
/// past time means the retry is running, waits behind other work, or was
/// dropped as stale (its event was resubmitted meanwhile, decision 0041):
/// an operator should not read it as still to come.
fn retry_note(retry_at: &str, now: SystemTime) -> String {
    let due = humantime::parse_rfc3339_weak(retry_at).is_ok_and(|at| at <= now);
    let when = if due { "due since" } else { "at" };
    format!(", retry {when} {}", time_on(retry_at, now))
}

/// An ISO 8601 UTC time as its time of day when it falls on `now`'s date
/// (UTC), else with its date: a policy's retry may be hours or days away.
fn time_on(iso: &str, now: SystemTime) -> String {
    let today = humantime::format_rfc3339_seconds(now).to_string();
    match (iso.get(..10), today.get(..10)) {
        (Some(date), Some(today)) if date != today && iso.get(10..11) == Some("T") => {
            format!("{date} {}", clock_time(iso))
        }
        _ => clock_time(iso),
    }
}

/// The time of day of an ISO 8601 UTC time (`2026-12-01T15:14:22.123Z` →
/// `15:14:22Z`); the text as it is otherwise.
fn clock_time(iso: &str) -> String {
    match iso.split_once('T') {
        Some((_, time)) => format!("{}Z", time.get(..8).unwrap_or(time)),
        None => iso.to_owned(),
    }
}

/// The parked count, with how many of those the operator already settled
/// (their copies are dropped, not run, when the session replays).
fn parked_cell(session: &Value) -> String {
    let parked = text(&session["parked"]);
    match session["settled_while_parked"].as_array().map(Vec::len) {
        Some(settled) if settled > 0 => format!("{parked} ({settled} settled, to drop)"),
        _ => parked,
    }
}

fn dead_letters_table(listed: &Value) -> String {
    let rows: Vec<Vec<String>> = listed
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            vec![
                text(&d["endpoint"]),
                text(&d["subscription"]),
                text(&d["sequence_number"]),
                text(&d["message_id"]),
                text(&d["message_type"]),
                text(&d["event_id"]),
                text(&d["event_status"]),
                text(&d["session_id"]),
                text(&d["delivery_count"]),
                text(&d["reason"]),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no dead-lettered messages\n".to_owned();
    }
    table(
        &[
            "ENDPOINT",
            "QUEUE",
            "SEQ",
            "MESSAGE ID",
            "TYPE",
            "EVENT",
            "EVENT NOW",
            "SESSION",
            "DELIVERIES",
            "REASON",
        ],
        &rows,
    )
}

fn handlers_table(handlers: &Value) -> String {
    let rows: Vec<Vec<String>> = handlers["handlers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            let types: Vec<String> = h["event_types"]
                .as_array()
                .into_iter()
                .flatten()
                .map(text)
                .collect();
            let mut status = text(&h["status"]);
            if let Some(at) = h["removing_at"].as_str() {
                let _ = write!(status, " (until {})", clock_time(at));
            }
            vec![
                text(&h["endpoint"]),
                text(&h["handler"]),
                status,
                short_version(&h["version"]),
                types.join(","),
                text(&h["last_swap"]),
                text(&h["load_error"]),
            ]
        })
        .collect();
    let mut out = if rows.is_empty() {
        "no handlers\n".to_owned()
    } else {
        table(
            &[
                "ENDPOINT",
                "HANDLER",
                "STATUS",
                "VERSION",
                "EVENT TYPES",
                "LAST SWAP",
                "LOAD ERROR",
            ],
            &rows,
        )
    };
    for problem in handlers["problems"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "problem: {}", text(problem));
    }
    out
}

/// The body of `POST /api/dlq/replay` or `/api/dlq/remove`: the message
/// named, or the whole pass the command's flag (`all`, `settled`) asks for.
fn dlq_body(target: DlqTargetArgs, (whole_field, whole): (&str, bool), force: bool) -> Value {
    let mut body = json!({
        "endpoint": target.endpoint,
        "subscription": target.subscription,
        "sequence_number": target.sequence,
        "message_id": target.message_id,
        "force": force,
    });
    body[whole_field] = Value::Bool(whole);
    body
}

/// What to do about a dead-lettered message `dlq replay --all` left, by the
/// API's `reason`. A settled or unknown event's text already says to force
/// the replay; a lock that lapsed needs only another pass, where `--force`
/// would change nothing.
fn left_hint(reason: &str) -> &'static str {
    match reason {
        "lock_lost" => " (its lock lapsed during the pass; run the command again)",
        _ => "",
    }
}

/// Says on stderr when a published event reaches no handler now: where it
/// waits (an endpoint whose handler does not load but whose forwarding
/// carries the type) or that nothing will receive it.
fn publish_note(event_type: &str, answer: &Value) {
    let names = |field: &str| -> Vec<String> {
        answer[field]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect()
    };
    let consumed_by = names("consumed_by");
    let waiting_at = names("waiting_at");
    let fails_at = names("fails_at");
    let not_loading = names("not_loading");
    let paused_at = names("paused_at");
    if !paused_at.is_empty() {
        errln!(
            "note: {} {} paused: the event waits in {} queue until `nimbus resume`",
            paused_at.join(", "),
            if paused_at.len() == 1 { "is" } else { "are" },
            if paused_at.len() == 1 { "its" } else { "their" },
        );
    }
    // Where other handlers of the endpoint run, the event cannot wait in
    // the queue: it fails and blocks its session until fixed and resubmitted.
    if !fails_at.is_empty() {
        errln!(
            "note: at {} no loaded handler serves {event_type} and a handler does not load \
             (see `nimbus handlers`): the event fails there (HandlerNotLoaded) and blocks its \
             session; fix the handler, then `nimbus resubmit` it",
            fails_at.join(", ")
        );
    }
    if !consumed_by.is_empty() {
        // Handled now where it loads; a copy also waits where it does not.
        if !waiting_at.is_empty() {
            errln!(
                "note: {event_type} is handled at {} now; its copy for {} waits in {} queue \
                 (a handler that does not load, see `nimbus handlers`) until {} fixed",
                consumed_by.join(", "),
                waiting_at.join(", "),
                if waiting_at.len() == 1 {
                    "its"
                } else {
                    "their"
                },
                if waiting_at.len() == 1 {
                    "it is"
                } else {
                    "they are"
                },
            );
        }
        return;
    }
    if !waiting_at.is_empty() {
        errln!(
            "note: no handler serves {event_type} now; the event waits in the queue of {} \
             (a handler that does not load, see `nimbus handlers`) until it is fixed",
            waiting_at.join(", ")
        );
    } else if !fails_at.is_empty() {
        // Said above.
    } else if !not_loading.is_empty() {
        errln!(
            "note: no handler consumes {event_type} now; the event reaches no endpoint. {} \
             ha{} a handler that does not load (see `nimbus handlers`) but no forwarding for \
             {event_type}, so this event will not reach {} even once fixed",
            not_loading.join(", "),
            if not_loading.len() == 1 { "s" } else { "ve" },
            if not_loading.len() == 1 { "it" } else { "them" },
        );
    } else {
        errln!("note: no handler consumes {event_type} now; the event reaches no endpoint");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::json;
    use serde_json::value::RawValue;

    use super::{PublishBody, event_text, events_table, left_hint, overdue, retry_note};

    /// A Pending event whose last delivery failed transiently says so under
    /// its status, with the next delivery's time; a quiet one does not.
    #[test]
    fn a_pending_event_failing_transiently_says_so_under_its_status() {
        let event = json!({
            "event_id": "ev-1",
            "endpoints": [{
                "record": {"event_id": "ev-1", "endpoint": "erp", "status": "Pending"},
                "history": [],
                "transient_failure": {
                    "delivery": 2, "max_deliveries": 10,
                    "error_type": "PartnerDown", "error": "erp said\n503",
                    "failed_at": "2026-12-01T15:14:22.123Z",
                    "next_delivery_after": "2026-12-01T15:14:27.123Z",
                },
            }],
        });
        let text = event_text(&event);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[2], "status      Pending", "{text}");
        assert_eq!(
            lines[3],
            "retrying    delivery 2 of 10 failed transiently at 15:14:22Z (PartnerDown: erp \
             said 503); next delivery after 15:14:27Z",
            "{text}"
        );
        let quiet = json!({"endpoints": [{"record": {"status": "Pending"}, "history": []}]});
        assert!(!event_text(&quiet).contains("retrying"));
        let with_properties = json!({"endpoints": [{
            "record": {"status": "Pending", "properties": r#"{"Tenant":"acme"}"#},
            "history": [],
        }]});
        assert!(
            event_text(&with_properties).contains("properties  {\"Tenant\":\"acme\"}"),
            "{}",
            event_text(&with_properties)
        );
    }

    /// Issue 40: a newline in what a publisher or handler chose (session
    /// and event id, type, error text, properties) stays in its field: it
    /// cannot start a line that reads as another field, as the tables keep
    /// a cell on its row.
    #[test]
    fn a_newline_in_a_peer_chosen_field_cannot_forge_a_line_of_the_detail_view() {
        let forged = "\nstatus      Completed";
        let event = json!({
            "endpoints": [{
                "record": {
                    "event_id": format!("ev-1{forged}"), "endpoint": "billing",
                    "status": "Failed", "event_type": format!("OrderPlaced{forged}"),
                    "session_id": format!("s-1{forged}\r\t"),
                    "correlation_id": format!("c{forged}"),
                    "error_type": format!("Rejected{forged}"),
                    "error_text": format!("no{forged}"),
                    "dead_letter_reason": format!("Permanent{forged}"),
                    "dead_letter_description": "why",
                    "external_job_id": format!("job{forged}"),
                    "handoff_reason": format!("erp{forged}"),
                    "payload": format!("{{}}{forged}"),
                    "properties": format!("{{\"Tenant\":\"acme{forged}\"}}"),
                },
                "waiting_for_handler": format!("none{forged}"),
                "history": [],
            }],
        });
        let text = event_text(&event);
        let status_lines: Vec<&str> = text.lines().filter(|l| l.starts_with("status")).collect();
        assert_eq!(status_lines, ["status      Failed"], "{text}");
        assert!(
            text.contains("session     s-1\\nstatus      Completed\\r\\t\n"),
            "{text}"
        );
        assert!(
            text.contains("error       Rejected\\nstatus      Completed: no\\nstatus"),
            "{text}"
        );
        assert!(
            text.contains("properties  {\"Tenant\":\"acme\\nstatus"),
            "{text}"
        );
        // Each field, on a line of its own and no more.
        let labels: Vec<&str> = text
            .lines()
            .take_while(|l| *l != "history:")
            .map(|l| l.split_whitespace().next().unwrap_or(""))
            .collect();
        assert_eq!(
            labels,
            [
                "event",
                "endpoint",
                "status",
                "waiting",
                "type",
                "session",
                "correlation",
                "handler",
                "retries",
                "error",
                "dead-letter",
                "handoff",
                "payload",
                "properties"
            ],
            "{text}"
        );
    }

    #[test]
    fn a_retry_whose_time_has_passed_is_shown_as_due_not_to_come() {
        let at = |t: &str| humantime::parse_rfc3339(t).unwrap();
        // The API's round-trip format (seven fraction digits).
        let retry_at = "2026-12-01T15:14:22.1234567Z";
        assert_eq!(
            retry_note(retry_at, at("2026-12-01T15:14:00Z")),
            ", retry at 15:14:22Z"
        );
        assert_eq!(
            retry_note(retry_at, at("2026-12-01T15:20:00Z")),
            ", retry due since 15:14:22Z"
        );
        // An unreadable time is shown as it is, as still to come.
        assert_eq!(
            retry_note("later", at("2026-12-01T15:20:00Z")),
            ", retry at later"
        );
        // On another day than today, with its date.
        assert_eq!(
            retry_note(retry_at, at("2026-11-30T23:00:00Z")),
            ", retry at 2026-12-01 15:14:22Z"
        );
    }

    /// A history row's error reads as the event's error line does: type,
    /// then text (the type is what a classifier rule matches).
    #[test]
    fn a_history_row_shows_its_error_type_and_text() {
        let event = json!({
            "event_id": "ev-1",
            "endpoints": [{
                "record": {"event_id": "ev-1", "endpoint": "billing", "status": "Failed"},
                "history": [{
                    "message_id": "m-1", "message_type": "ErrorResponse", "status": "Failed",
                    "at_ms": 1_000, "from": "billing", "retry_count": 0,
                    "error_type": "LedgerRejected", "error_text": "invoice i-1 rejected",
                    "handler_version": null, "refused": null, "handoff": null,
                }],
            }],
        });
        let text = event_text(&event);
        assert!(!text.contains("properties"), "none recorded: {text}");
        let row = text
            .lines()
            .find(|l| l.contains("ErrorResponse"))
            .unwrap_or_else(|| panic!("no ErrorResponse row in\n{text}"));
        assert!(
            row.ends_with("LedgerRejected: invoice i-1 rejected"),
            "{text}"
        );
    }

    /// A settled handoff: the event's own handoff fields are empty, and the
    /// history shows the job the park named and the details the completion
    /// carried, each on its own row.
    #[test]
    fn the_history_shows_each_messages_handoff() {
        let entry = |message_type: &str, at_ms: u64, handoff: serde_json::Value| {
            json!({
                "message_id": format!("m-{at_ms}"), "message_type": message_type,
                "status": "Pending", "at_ms": at_ms, "from": "erp", "retry_count": 0,
                "error_type": null, "error_text": null, "handler_version": null,
                "refused": null, "handoff": handoff,
            })
        };
        let event = json!({
            "event_id": "ev-1",
            "endpoints": [{
                "record": {
                    "event_id": "ev-1", "endpoint": "erp", "status": "Completed",
                    "sub_status": null, "external_job_id": null, "expected_by": null,
                    "handoff_reason": null, "retry_count": 0, "payload": "{}",
                },
                "history": [
                    entry("EventRequest", 1_000, json!(null)),
                    entry("PendingHandoffResponse", 2_000, json!({
                        "external_job_id": "dmf-ev-1",
                        "expected_by": "2026-11-30T10:15:00.0000000Z",
                        "reason": "DMF import in flight",
                    })),
                    entry("HandoffCompletedRequest", 3_000, json!({
                        "details": "{\"RowsImported\":\n 1200}",
                    })),
                ],
            }],
        });
        let text = event_text(&event);
        let lines: Vec<&str> = text.lines().collect();
        let row = |message_type: &str| {
            lines
                .iter()
                .find(|l| l.contains(message_type))
                .unwrap_or_else(|| panic!("no {message_type} row in\n{text}"))
                .to_owned()
        };
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("AT") && l.ends_with("NOTE")),
            "{text}"
        );
        assert!(
            row("PendingHandoffResponse").ends_with(
                "job dmf-ev-1 (expected by 2026-11-30T10:15:00.0000000Z): DMF import in flight"
            ),
            "{text}"
        );
        assert!(
            row("HandoffCompletedRequest").ends_with(r#"details {"RowsImported": 1200}"#),
            "{text}"
        );
        assert!(row("EventRequest").ends_with(" -"), "{text}");
        assert!(!text.contains("handoff     job"), "none in flight: {text}");
    }

    #[test]
    fn a_handoff_past_its_expected_time_is_overdue() {
        let expected = json!("2026-12-01T10:00:00.0000000Z");
        let at = |s: &str| humantime::parse_rfc3339(s).expect("a time");
        assert_eq!(overdue(&expected, at("2026-12-01T09:59:00Z")), None);
        assert_eq!(overdue(&expected, at("2026-12-01T10:00:00Z")), None);
        assert_eq!(
            overdue(&expected, at("2026-12-01T10:05:30Z")).as_deref(),
            Some("5m 30s")
        );
        assert_eq!(
            overdue(&expected, at("2026-12-01T12:05:30Z")).as_deref(),
            Some("2h 5m")
        );
        assert_eq!(overdue(&json!(null), at("2026-12-01T12:00:00Z")), None);
        assert_eq!(overdue(&json!("soon"), at("2026-12-01T12:00:00Z")), None);

        let events = json!([{
            "event_id": "ev-1", "endpoint": "erp", "session_id": "s", "status": "Pending",
            "sub_status": "Handoff", "event_type": "Import", "retry_count": 0,
            "updated_ms": 0, "error_type": null,
            "expected_by": "2000-01-01T00:00:00.0000000Z",
        }]);
        let table = events_table(&events);
        assert!(table.contains("Pending/Handoff (overdue "), "{table}");
    }

    #[test]
    fn a_dead_letter_reason_that_holds_its_description_is_shown_once() {
        let event = |reason: &str, description: &str| {
            json!({
                "event_id": "ev-1",
                "endpoints": [{
                    "record": {"event_id": "ev-1", "endpoint": "sales", "status": "DeadLettered",
                               "dead_letter_reason": reason,
                               "dead_letter_description": description},
                    "history": [],
                }],
            })
        };
        let permanent = event_text(&event(
            "Permanent failure: EmptyOrder: no lines",
            "EmptyOrder: no lines",
        ));
        assert!(
            permanent.contains("dead-letter Permanent failure: EmptyOrder: no lines\n"),
            "{permanent}"
        );
        let exhausted = event_text(&event(
            "MaxDeliveryCountExceeded",
            "Transient failure on delivery 10 of 10: Timeout: ERP down",
        ));
        assert!(
            exhausted.contains(
                "dead-letter MaxDeliveryCountExceeded: Transient failure on delivery 10 of 10"
            ),
            "{exhausted}"
        );
    }

    #[test]
    fn a_property_is_name_equals_value_and_travels_in_the_publish_body() {
        use crate::cli_ops::name_value;
        assert_eq!(
            name_value("Region=EU=west"),
            Ok(("Region".to_owned(), "EU=west".to_owned()))
        );
        assert_eq!(
            name_value("Empty="),
            Ok(("Empty".to_owned(), String::new()))
        );
        assert!(name_value("=x").is_err());
        assert!(name_value("Region").is_err());

        let data = RawValue::from_string("{}".to_owned()).unwrap();
        let body = PublishBody {
            event_type: "T",
            data: &data,
            session_id: None,
            correlation_id: None,
            message_id: None,
            from: None,
            properties: Some([("Region", "EU")].into_iter().collect()),
        };
        let json: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&body).unwrap()).unwrap();
        assert_eq!(json["properties"], json!({"Region": "EU"}));
        let none = PublishBody {
            properties: None,
            ..body
        };
        assert!(!serde_json::to_string(&none).unwrap().contains("properties"));
    }

    #[test]
    fn a_skip_reason_is_a_reason_not_an_error_with_a_blank_type() {
        let event = |error_type: serde_json::Value, error_text: &str| {
            json!({
                "event_id": "ev-1",
                "endpoints": [{
                    "record": {"event_id": "ev-1", "endpoint": "sales", "status": "Skipped",
                               "error_type": error_type, "error_text": error_text},
                    "history": [],
                }],
            })
        };
        let skipped = event_text(&event(serde_json::Value::Null, "DuplicateDetected"));
        assert!(
            skipped.contains("reason      DuplicateDetected\n"),
            "{skipped}"
        );
        assert!(!skipped.contains("error "), "{skipped}");
        let failed = event_text(&event(json!("Boom"), "it broke"));
        assert!(failed.contains("error       Boom: it broke\n"), "{failed}");
    }

    #[test]
    fn the_history_shows_the_payload_an_edited_resubmission_replaced() {
        let event = json!({
            "event_id": "ev-1",
            "endpoints": [{
                "record": {"event_id": "ev-1", "endpoint": "sales", "status": "Completed",
                           "payload": "{\"Lines\": [1]}"},
                "history": [{
                    "message_id": "m-1", "message_type": "ResubmissionRequest",
                    "status": "Pending", "at_ms": 1_000, "from": "Manager", "retry_count": 0,
                    "error_type": null, "error_text": null, "handler_version": null,
                    "refused": null, "handoff": null,
                    "replaced_payload": "{\"Lines\":\n []}",
                }],
            }],
        });
        let text = event_text(&event);
        assert!(
            text.lines().any(|l| l.contains("ResubmissionRequest")
                && l.ends_with(r#"payload edited; before: {"Lines": []}"#)),
            "{text}"
        );
    }

    /// By the API's machine-readable reason, not the English text.
    #[test]
    fn a_lapsed_lock_is_advised_another_pass_and_the_others_no_second_hint() {
        assert_eq!(
            left_hint("lock_lost"),
            " (its lock lapsed during the pass; run the command again)"
        );
        for reason in [
            "settled",
            "not_recorded",
            "replayed_in_this_pass",
            "still_needed",
            "other",
        ] {
            assert_eq!(left_hint(reason), "", "{reason}");
        }
    }
}
