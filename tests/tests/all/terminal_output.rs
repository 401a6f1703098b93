//! What the CLI prints is safe for the operator's terminal: a session id
//! chosen by a publisher, holding escape sequences and a bidi override,
//! comes out of every listing written out, never raw, and `--json` still
//! gives it back exactly.

use nimbus_blackbox_tests::Scratch;
use nimbus_blackbox_tests::orders::{id, order, publish};
use nimbus_blackbox_tests::running::RunningHost;

/// Clears the screen, sets the window title, rings the bell, returns the
/// cursor to overwrite the line, starts a line that reads as another field
/// of `nimbus event` (issue 40), and reverses what follows.
const HOSTILE_SESSION: &str =
    "s\u{1b}[2J\u{1b}]0;owned\u{7}\r\nstatus      Completed\u{9b}1A\u{202e}kcab";

/// The bytes no terminal should receive from a listing.
fn raw_controls(output: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(output);
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n' && c != '\t')
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .map(|c| format!("U+{:04X}", u32::from(c)))
        .collect()
}

#[test]
fn a_session_id_holding_escape_sequences_is_printed_written_out() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");

    let published = publish(&host, "OrderPlaced", HOSTILE_SESSION, &order("o-1", true));
    let failed = host.wait_status(HOSTILE_SESSION, &published, "Failed");
    // JSON is for programs: the session comes back exactly as published.
    assert_eq!(failed["session_id"], HOSTILE_SESSION);

    let shown = r"s\x1b[2J\x1b]0;owned\x07\r\nstatus      Completed\x9b1A\u{202e}kcab";
    for args in [
        vec!["events", "--endpoint", "billing"],
        vec!["events", "--session", HOSTILE_SESSION],
        vec!["sessions", "--endpoint", "billing", "--blocked"],
        vec!["event", &id(&failed)],
    ] {
        let run = host.cli(&args);
        run.expect_code(0);
        assert_eq!(
            raw_controls(&run.output.stdout),
            Vec::<String>::new(),
            "`nimbus {args:?}` printed control characters raw:\n{}",
            run.stdout()
        );
        assert!(
            run.stdout().contains(shown),
            "`nimbus {args:?}` does not show the session written out:\n{}",
            run.stdout()
        );
        assert!(
            !run.stdout()
                .lines()
                .any(|l| l.starts_with("status      Completed")),
            "`nimbus {args:?}` printed a line the session id forged:\n{}",
            run.stdout()
        );
    }

    // The JSON form escapes them as JSON does, so it stays valid and exact.
    let json = host.cli(&["events", "--session", HOSTILE_SESSION, "--json"]);
    json.expect_code(0);
    assert_eq!(raw_controls(&json.output.stdout), Vec::<String>::new());
    assert_eq!(json.json()[0]["session_id"], HOSTILE_SESSION);
}
