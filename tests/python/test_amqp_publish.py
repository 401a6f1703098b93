"""Microsoft's Python SDK against `nimbus run`'s AMQP endpoint (issue 29):
what it publishes reaches the handlers, and a token the endpoint's keys did
not sign, or one for another entity, is refused as Service Bus refuses it."""

import base64
import hashlib
import hmac
import json
import time
import urllib.parse
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from azure.core.credentials import AzureSasCredential
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import (
    MessageNotFoundError,
    MessagingEntityNotFoundError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
)

DEADLINE_SECONDS = 90


def connection_string(host, key=None, key_name=None):
    return (
        f"Endpoint=sb://{host['amqp']};"
        f"SharedAccessKeyName={key_name or host['key_name']};"
        f"SharedAccessKey={key or host['key']};UseDevelopmentEmulator=true;"
    )


def sas_token(audience, key_name, key, expiry):
    """A shared access signature as Service Bus defines it, made here
    independently of the SDK."""
    encoded = urllib.parse.quote_plus(audience)
    signed = hmac.new(key.encode(), f"{encoded}\n{expiry}".encode(), hashlib.sha256)
    signature = urllib.parse.quote_plus(base64.b64encode(signed.digest()))
    return f"SharedAccessSignature sr={encoded}&sig={signature}&se={expiry}&skn={key_name}"


def events(host, session):
    query = urllib.parse.urlencode({"session": session})
    with urllib.request.urlopen(f"{host['api']}/api/events?{query}", timeout=10) as answer:
        return json.load(answer)


def wait_for(host, session, count, status):
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        seen = events(host, session)
        if len([e for e in seen if e["status"] == status]) >= count:
            return seen
        assert time.monotonic() < deadline, f"{session}: {seen}"
        time.sleep(0.1)


def nimbus_event(order_id, session):
    """An OrderPlaced event as a NimBus .NET publisher writes it."""
    order = {"OrderId": order_id, "Customer": "acme", "Total": 10.0, "Fail": False,
             "Lines": [{"Sku": "A-1", "Quantity": 1, "UnitPrice": 10.0}]}
    body = {"EventContent": {"EventTypeId": "OrderPlaced", "EventJson": json.dumps(order)},
            "ErrorContent": None}
    properties = {"To": "OrderPlaced", "MessageType": "EventRequest", "EventId": None,
                  "OriginatingMessageId": "self", "ParentMessageId": "self", "RetryCount": 0,
                  "OriginatingFrom": "publisher", "EventTypeId": "OrderPlaced"}
    return ServiceBusMessage(json.dumps(body), session_id=session, message_id=str(uuid.uuid4()),
                             correlation_id=f"corr-{order_id}", application_properties=properties)


def test_a_nimbus_event_from_python_is_handled_by_the_wasm_handler(host):
    event = nimbus_event("o-py-1", "py-one")
    with ServiceBusClient.from_connection_string(connection_string(host), retry_total=0) as client:
        with client.get_topic_sender("publisher") as sender:
            sender.send_messages(event)
    [record] = wait_for(host, "py-one", 1, "Completed")
    assert record["endpoint"] == "billing"
    assert record["event_type"] == "OrderPlaced"
    assert record["request_message_id"] == event.message_id
    assert record["correlation_id"] == "corr-o-py-1"


def test_a_batch_is_published_whole_and_in_order(host):
    with ServiceBusClient.from_connection_string(connection_string(host), retry_total=0) as client:
        with client.get_topic_sender("PUBLISHER") as sender:  # names ignore case
            batch = sender.create_message_batch()
            for n in range(3):
                batch.add_message(nimbus_event(f"o-batch-{n}", "py-batch"))
            sender.send_messages(batch)
            sender.send_messages([nimbus_event(f"o-list-{n}", "py-list") for n in range(2)])
    assert len(wait_for(host, "py-batch", 3, "Completed")) == 3
    assert len(wait_for(host, "py-list", 2, "Completed")) == 2


@pytest.mark.parametrize("key_name, key", [
    (None, "not-the-key"),
    ("NoSuchKey", None),
])
def test_a_token_not_signed_with_a_configured_key_is_refused(host, key_name, key):
    cs = connection_string(host, key=key, key_name=key_name)
    session = f"py-refused-{key_name or 'wrong-key'}"
    with ServiceBusClient.from_connection_string(cs, retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_topic_sender("publisher") as sender:
                sender.send_messages(nimbus_event("o-refused", session))
    assert events(host, session) == []


def test_an_expired_token_is_refused(host):
    audience = f"sb://{host['amqp']}/publisher"
    token = sas_token(audience, host["key_name"], host["key"], int(time.time()) - 60)
    with ServiceBusClient(host["amqp"], AzureSasCredential(token), use_tls=False,
                          retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_topic_sender("publisher") as sender:
                sender.send_messages(nimbus_event("o-expired", "py-expired"))
    assert events(host, "py-expired") == []


def test_a_token_for_another_entity_does_not_grant_this_one(host):
    audience = f"sb://{host['amqp']}/billing"
    token = sas_token(audience, host["key_name"], host["key"], int(time.time()) + 3600)
    with ServiceBusClient(host["amqp"], AzureSasCredential(token), use_tls=False,
                          retry_total=0) as client:
        with client.get_topic_sender("publisher") as sender:
            with pytest.raises(ServiceBusAuthorizationError, match="gives Send on 'publisher'"):
                sender.send_messages(nimbus_event("o-elsewhere", "py-elsewhere"))
    assert events(host, "py-elsewhere") == []


def test_an_unknown_topic_is_not_found(host):
    with ServiceBusClient.from_connection_string(connection_string(host), retry_total=0) as client:
        with client.get_topic_sender("no-such-topic") as sender:
            with pytest.raises(MessagingEntityNotFoundError, match="no-such-topic"):
                sender.send_messages(ServiceBusMessage("x", session_id="s"))


def test_a_message_scheduled_for_later_is_handled_then(host):
    event = nimbus_event("o-later", "py-later")
    event.scheduled_enqueue_time_utc = datetime.now(timezone.utc) + timedelta(seconds=6)
    with ServiceBusClient.from_connection_string(connection_string(host), retry_total=0) as client:
        with client.get_topic_sender("publisher") as sender:
            sender.send_messages(event)
    assert events(host, "py-later") == [], "not before its time"
    [record] = wait_for(host, "py-later", 1, "Completed")
    assert record["request_message_id"] == event.message_id


def test_scheduled_messages_can_be_cancelled_before_their_time(host):
    later = datetime.now(timezone.utc) + timedelta(seconds=8)
    kept = nimbus_event("o-kept", "py-schedule-kept")
    cancelled = nimbus_event("o-cancelled", "py-schedule-cancelled")
    with ServiceBusClient.from_connection_string(connection_string(host), retry_total=0) as client:
        with client.get_topic_sender("publisher") as sender:
            numbers = sender.schedule_messages([kept, cancelled], later)
            assert len(numbers) == 2 and numbers[0] != numbers[1], numbers
            sender.cancel_scheduled_messages(numbers[1])
            with pytest.raises(MessageNotFoundError):
                sender.cancel_scheduled_messages(numbers[1])
    [record] = wait_for(host, "py-schedule-kept", 1, "Completed")
    assert record["request_message_id"] == kept.message_id
    assert events(host, "py-schedule-cancelled") == [], "cancelled before its time"
