"""Issue 40: an SDK client with a configured key cannot act as the Manager.

NimBus trusts `From = Manager`, and any client may write it. Here a Python
client forges each control message (resubmit, skip, handoff complete,
handoff fail) for a blocked event, as a NimBus Manager would write it: the
endpoint refuses each send, the event stays as it was, and the operator's
own commands through the HTTP API still work afterwards."""

import json
import time
import urllib.parse
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusAuthorizationError, ServiceBusError

from test_amqp_publish import connection_string, events, wait_for

DEADLINE_SECONDS = 90
REFUSED = "only a nimbus host's Manager may send"
CONTROL_TYPES = ["ResubmissionRequest", "SkipRequest", "HandoffCompletedRequest",
                 "HandoffFailedRequest"]


def client(host):
    return ServiceBusClient.from_connection_string(connection_string(host), retry_total=0)


def publish(host, event_type, session, payload):
    """An original publish of `event_type`, as a NimBus publisher writes it."""
    body = {"EventContent": {"EventTypeId": event_type, "EventJson": json.dumps(payload)},
            "ErrorContent": None}
    properties = {"To": event_type, "MessageType": "EventRequest",
                  "OriginatingMessageId": "self", "ParentMessageId": "self", "RetryCount": 0,
                  "OriginatingFrom": "publisher", "EventTypeId": event_type}
    message = ServiceBusMessage(json.dumps(body), session_id=session,
                                message_id=str(uuid.uuid4()), application_properties=properties)
    with client(host) as sb, sb.get_topic_sender("publisher") as sender:
        sender.send_messages(message)


def order(order_id, fail):
    return {"OrderId": order_id, "Customer": "acme", "Total": 10.0, "Fail": fail,
            "Lines": [{"Sku": "A-1", "Quantity": 1, "UnitPrice": 10.0}]}


def forged(kind, record, **overrides):
    """`kind` about the event of `record`, as upstream's Manager writes it:
    `To` the endpoint, `From = Manager`, the event's id and session, and the
    client's own payload or error text."""
    event_type = record["event_type"]
    content = {"EventContent": None, "ErrorContent": None}
    if kind == "ResubmissionRequest":
        content["EventContent"] = {"EventTypeId": event_type,
                                   "EventJson": json.dumps({"Forged": True})}
    if kind == "HandoffFailedRequest":
        content["ErrorContent"] = {"ErrorText": "forged by a client", "ErrorType": "Forged"}
    properties = {"To": record["endpoint"], "From": "Manager", "MessageType": kind,
                  "EventId": record["event_id"], "EventTypeId": event_type,
                  "OriginatingMessageId": "self", "ParentMessageId": "self", "RetryCount": 0,
                  "OriginatingFrom": "self", **overrides}
    return ServiceBusMessage(json.dumps(content), session_id=record["session_id"],
                             message_id=f"forged-{uuid.uuid4()}",
                             application_properties=properties)


def one(host, session, wanted):
    """The event of `session` that `wanted` picks, once it is there."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        found = [e for e in events(host, session) if wanted(e)]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"{session}: {events(host, session)}"
        time.sleep(0.1)


def api_post(host, path, body):
    request = urllib.request.Request(f"{host['api']}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"},
                                     method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def history(host, record):
    quoted = urllib.parse.quote(record["event_id"], safe="")
    with urllib.request.urlopen(f"{host['api']}/api/events/{quoted}", timeout=10) as answer:
        [at] = [e for e in json.load(answer)["endpoints"]
                if e["record"]["endpoint"] == record["endpoint"]]
        return at["history"]


def blocked_order(host, session):
    """A failed order blocking `session`, with a second one parked behind it."""
    publish(host, "OrderPlaced", session, order(f"{session}-1", fail=True))
    publish(host, "OrderPlaced", session, order(f"{session}-2", fail=False))
    wait_for(host, session, 1, "Deferred")
    return one(host, session, lambda e: e["status"] == "Failed")


def handed_off(host, session):
    """An event pending its handoff at `echoes`, with a second one parked."""
    publish(host, "Echo", session, {"Outcome": "PendingHandoff", "Reason": "DMF import",
                                    "JobId": f"job-{session}", "ExpectedWithinMs": 60000})
    publish(host, "Echo", session, {})
    wait_for(host, session, 1, "Deferred")
    return one(host, session,
               lambda e: e["status"] == "Pending" and e["sub_status"] == "Handoff")


def forge_each(host, record):
    """Every control message, forged about `record`'s event: each refused."""
    with client(host) as sb, sb.get_topic_sender(record["endpoint"]) as sender:
        for kind in CONTROL_TYPES:
            with pytest.raises(ServiceBusAuthorizationError, match=REFUSED):
                sender.send_messages(forged(kind, record))
        # The type as upstream's number, `From` in another case, a batch.
        with pytest.raises(ServiceBusAuthorizationError, match=REFUSED):
            sender.send_messages(forged("SkipRequest", record, MessageType="7"))
        with pytest.raises(ServiceBusAuthorizationError, match=REFUSED):
            sender.send_messages(forged("SkipRequest", record, From="manager"))
        with pytest.raises(ServiceBusAuthorizationError, match=REFUSED):
            sender.send_messages([forged(kind, record) for kind in CONTROL_TYPES])
        # Scheduled (the $management node's schedule-message): refused too.
        later = datetime.now(timezone.utc) + timedelta(seconds=2)
        with pytest.raises(ServiceBusError, match=REFUSED):
            sender.schedule_messages(forged("SkipRequest", record), later)


def unchanged(host, before):
    """The event is as it was, and no forged message is in its history."""
    [now] = [e for e in events(host, before["session_id"])
             if e["event_id"] == before["event_id"]]
    assert (now["status"], now["sub_status"]) == (before["status"], before["sub_status"]), now
    ids = [h["message_id"] for h in history(host, before)]
    assert not [i for i in ids if i and i.startswith("forged-")], ids


def test_forged_control_messages_about_a_failed_event_change_nothing(host):
    resubmitted = blocked_order(host, "py-control-resubmit")
    skipped = blocked_order(host, "py-control-skip")
    for record in (resubmitted, skipped):
        forge_each(host, record)
    time.sleep(3)  # past the scheduled forgery's time: nothing came of it
    for record in (resubmitted, skipped):
        unchanged(host, record)

    fixed = order("py-control-resubmit-1", fail=False)
    api_post(host, f"/api/events/{resubmitted['event_id']}/resubmit", {"data": fixed})
    assert len(wait_for(host, "py-control-resubmit", 2, "Completed")) == 2
    api_post(host, f"/api/events/{skipped['event_id']}/skip", {})
    wait_for(host, "py-control-skip", 1, "Skipped")
    wait_for(host, "py-control-skip", 1, "Completed")


def test_forged_control_messages_about_a_handoff_change_nothing(host):
    completed = handed_off(host, "py-control-complete")
    failed = handed_off(host, "py-control-fail")
    for record in (completed, failed):
        forge_each(host, record)
    time.sleep(3)
    for record in (completed, failed):
        unchanged(host, record)

    api_post(host, f"/api/events/{completed['event_id']}/handoff/complete",
             {"details": {"Rows": 12}})
    assert len(wait_for(host, "py-control-complete", 2, "Completed")) == 2
    api_post(host, f"/api/events/{failed['event_id']}/handoff/fail",
             {"error": "the operator's own text"})
    [record] = [e for e in wait_for(host, "py-control-fail", 1, "Failed")
                if e["status"] == "Failed"]
    assert record["error_text"] == "the operator's own text", record


def test_a_message_claiming_to_be_from_the_manager_is_refused(host):
    event = {"EventContent": {"EventTypeId": "OrderPlaced",
                              "EventJson": json.dumps(order("py-control-from", fail=False))},
             "ErrorContent": None}
    message = ServiceBusMessage(json.dumps(event), session_id="py-control-from",
                                message_id=str(uuid.uuid4()),
                                application_properties={"To": "OrderPlaced",
                                                        "From": "MANAGER",
                                                        "MessageType": "EventRequest",
                                                        "EventTypeId": "OrderPlaced"})
    with client(host) as sb, sb.get_topic_sender("publisher") as sender:
        with pytest.raises(ServiceBusAuthorizationError, match="From = Manager"):
            sender.send_messages(message)
    assert events(host, "py-control-from") == []
