"""Microsoft's Python SDK receiving from `nimbus run`'s AMQP endpoint
(issue 29): session receivers, named and next available, settle with the
outcome the broker applied, session state and lock renewal on the
subscription's $management node, the dead-letter queue, and the errors
Service Bus gives for a lost lock, a session held elsewhere and no session
free.

The messages go where NimBus parks events for a blocked session: the
endpoint topic's `Deferred` subscription, which the host reads only when it
unblocks a session, so these receivers are the only ones on it."""

import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import (
    MessageLockLostError,
    OperationTimeoutError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)

from test_amqp_publish import connection_string

TOPIC = "billing"
PARKED = "Deferred"
WAIT = 5


def parked(session, body, **properties):
    """A message as NimBus parks it behind a blocked session."""
    return ServiceBusMessage(body, session_id=session, message_id=str(uuid.uuid4()),
                             application_properties={"To": "Deferred",
                                                     "OriginalSessionId": session, **properties})


def client(host):
    return ServiceBusClient.from_connection_string(connection_string(host), retry_total=0)


def publish(host, *messages):
    with client(host) as sb, sb.get_topic_sender(TOPIC) as sender:
        sender.send_messages(list(messages))


def receive_all(receiver, count):
    got = []
    deadline = time.monotonic() + 30
    while len(got) < count:
        assert time.monotonic() < deadline, f"received {len(got)} of {count}"
        got += receiver.receive_messages(max_message_count=count - len(got), max_wait_time=WAIT)
    return got


def drain(receiver):
    """Completes what a receiver can still get, so the next test starts clean."""
    while batch := receiver.receive_messages(max_message_count=10, max_wait_time=1):
        for message in batch:
            receiver.complete_message(message)


def test_a_named_session_delivers_in_order_with_lock_tokens_and_keeps_state(host):
    session = f"py-named-{uuid.uuid4().hex[:8]}"
    publish(host, *[parked(session, f"m{i}", Step=i) for i in range(3)])
    with client(host) as sb, sb.get_subscription_receiver(
            TOPIC, PARKED, session_id=session, max_wait_time=WAIT) as receiver:
        lease = receiver.session
        assert lease.session_id == session
        now = datetime.now(timezone.utc)
        # The host's locks last 5 s ([broker] lock_duration).
        assert now < lease.locked_until_utc <= now + timedelta(seconds=7)
        messages = receive_all(receiver, 3)
        assert [str(m) for m in messages] == ["m0", "m1", "m2"]
        assert [m.application_properties[b"Step"] for m in messages] == [0, 1, 2]
        assert len({m.lock_token for m in messages}) == 3
        assert all(isinstance(m.lock_token, uuid.UUID) for m in messages)
        sequence = [m.sequence_number for m in messages]
        assert sequence == sorted(sequence) and len(set(sequence)) == 3
        assert all(m.delivery_count == 0 for m in messages)
        assert all(m.session_id == session for m in messages)
        assert all(m.enqueued_time_utc is not None for m in messages)

        assert lease.get_state() is None
        lease.set_state(b"checkpoint-1")
        assert lease.get_state() == b"checkpoint-1"
        before = lease.locked_until_utc
        time.sleep(0.2)
        lease.renew_lock()
        assert lease.locked_until_utc > before

        for message in messages:
            receiver.complete_message(message)
        assert receiver.receive_messages(max_wait_time=1) == []
        lease.set_state(None)
        assert lease.get_state() is None


def test_abandon_redelivers_first_and_dead_letter_keeps_the_reason(host):
    session = f"py-settle-{uuid.uuid4().hex[:8]}"
    publish(host, parked(session, "first"), parked(session, "second"))
    with client(host) as sb:
        with sb.get_subscription_receiver(TOPIC, PARKED, session_id=session,
                                          max_wait_time=WAIT) as receiver:
            [first] = receive_all(receiver, 1)
            assert str(first) == "first"
            receiver.abandon_message(first)
            [again] = receive_all(receiver, 1)
            assert (str(again), again.delivery_count) == ("first", 1)
            receiver.dead_letter_message(again, reason="BadData",
                                         error_description="the total does not add up")
            [second] = receive_all(receiver, 1)
            assert str(second) == "second"
            receiver.complete_message(second)
        with sb.get_subscription_receiver(TOPIC, PARKED, sub_queue=ServiceBusSubQueue.DEAD_LETTER,
                                          max_wait_time=WAIT) as dead_letters:
            found = None
            for message in receive_all(dead_letters, 1) + dead_letters.receive_messages(
                    max_message_count=50, max_wait_time=1):
                if message.session_id == session:
                    found = message
                dead_letters.complete_message(message)
            assert found is not None
            assert str(found) == "first"
            assert found.dead_letter_reason == "BadData"
            assert found.dead_letter_error_description == "the total does not add up"


def test_a_session_held_by_another_receiver_cannot_be_locked(host):
    session = f"py-held-{uuid.uuid4().hex[:8]}"
    publish(host, parked(session, "only"))
    with client(host) as sb:
        with sb.get_subscription_receiver(TOPIC, PARKED, session_id=session,
                                          max_wait_time=WAIT) as holder:
            [message] = receive_all(holder, 1)
            with client(host) as other:
                with pytest.raises(SessionCannotBeLockedError):
                    with other.get_subscription_receiver(TOPIC, PARKED, session_id=session,
                                                         max_wait_time=WAIT) as second:
                        second.receive_messages(max_wait_time=1)
            holder.complete_message(message)


def test_next_available_takes_a_session_with_messages_then_times_out(host):
    session = f"py-next-{uuid.uuid4().hex[:8]}"
    publish(host, parked(session, "waiting"))
    taken = []
    with client(host) as sb:
        # Each turn takes a session with messages and empties it; when none
        # is left, the attach waits out the client's wait and is refused.
        for _ in range(20):
            started = time.monotonic()
            try:
                with sb.get_subscription_receiver(TOPIC, PARKED, session_id=NEXT_AVAILABLE_SESSION,
                                                  max_wait_time=2) as receiver:
                    taken.append(receiver.session.session_id)
                    drain(receiver)
            except OperationTimeoutError:
                waited = time.monotonic() - started
                break
        else:
            pytest.fail(f"next-available never timed out; took {taken}")
    assert session in taken
    assert waited < 30, f"the timeout took {waited:.1f} s for a 2 s wait"


def test_settling_after_the_session_lock_lapsed_is_session_lock_lost(host):
    session = f"py-lapse-{uuid.uuid4().hex[:8]}"
    publish(host, parked(session, "late"))
    with client(host) as sb:
        with sb.get_subscription_receiver(TOPIC, PARKED, session_id=session,
                                          max_wait_time=WAIT) as receiver:
            [message] = receive_all(receiver, 1)
            # The lock lasts 5 s; let it lapse unrenewed.
            time.sleep(7)
            with pytest.raises(SessionLockLostError):
                receiver.complete_message(message)
        # The message was not completed: it is delivered again.
        with sb.get_subscription_receiver(TOPIC, PARKED, session_id=session,
                                          max_wait_time=WAIT) as receiver:
            [again] = receive_all(receiver, 1)
            assert str(again) == "late"
            assert again.delivery_count == 1
            receiver.complete_message(again)


def test_the_broker_refuses_a_settlement_the_client_thought_was_in_time(host):
    """The client checks the lock's time itself; told the lock still runs,
    it sends the settlement, and the broker's answer is what refuses it."""
    session = f"py-refused-{uuid.uuid4().hex[:8]}"
    publish(host, parked(session, "stale"))
    with client(host) as sb:
        with sb.get_subscription_receiver(TOPIC, PARKED, session_id=session,
                                          max_wait_time=WAIT) as receiver:
            [message] = receive_all(receiver, 1)
            time.sleep(7)
            receiver.session._locked_until_utc = datetime.now(timezone.utc) + timedelta(hours=1)
            with pytest.raises(SessionLockLostError):
                receiver.complete_message(message)
        with sb.get_subscription_receiver(TOPIC, PARKED, session_id=session,
                                          max_wait_time=WAIT) as receiver:
            [again] = receive_all(receiver, 1)
            assert str(again) == "stale"
            receiver.complete_message(again)


def test_a_dead_letter_lock_is_renewed_and_once_lapsed_the_broker_refuses_it(host):
    session = f"py-dlq-lock-{uuid.uuid4().hex[:8]}"
    publish(host, parked(session, "to check"))
    with client(host) as sb:
        with sb.get_subscription_receiver(TOPIC, PARKED, session_id=session,
                                          max_wait_time=WAIT) as receiver:
            [message] = receive_all(receiver, 1)
            receiver.dead_letter_message(message, reason="ToCheck")
        with sb.get_subscription_receiver(TOPIC, PARKED, sub_queue=ServiceBusSubQueue.DEAD_LETTER,
                                          max_wait_time=WAIT) as dead_letters:
            ours = None
            while ours is None:
                [message] = receive_all(dead_letters, 1)
                if message.session_id == session:
                    ours = message
                else:
                    dead_letters.complete_message(message)
            assert ours.dead_letter_reason == "ToCheck"
            first_until = ours.locked_until_utc
            assert first_until is not None
            time.sleep(0.2)
            renewed = dead_letters.renew_message_lock(ours)
            assert renewed > first_until
            # Let the lock lapse, and have the client think it has not: the
            # broker's answer on the link is what refuses the settlement.
            time.sleep(7)
            ours._expiry = datetime.now(timezone.utc) + timedelta(hours=1)
            with pytest.raises(MessageLockLostError):
                dead_letters.complete_message(ours)
            [again] = receive_all(dead_letters, 1)
            assert again.session_id == session
            assert again.delivery_count == ours.delivery_count + 1
            dead_letters.complete_message(again)


def test_receive_and_delete_takes_each_message_once(host):
    session = f"py-delete-{uuid.uuid4().hex[:8]}"
    publish(host, parked(session, "one"), parked(session, "two"))
    with client(host) as sb:
        with sb.get_subscription_receiver(TOPIC, PARKED, session_id=session, max_wait_time=WAIT,
                                          receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            assert [str(m) for m in receive_all(receiver, 2)] == ["one", "two"]
        with sb.get_subscription_receiver(TOPIC, PARKED, session_id=session,
                                          max_wait_time=WAIT) as receiver:
            assert receiver.receive_messages(max_wait_time=1) == []


def test_peek_shows_a_sessions_messages_without_taking_them(host):
    session = f"py-peek-{uuid.uuid4().hex[:8]}"
    publish(host, *[parked(session, f"p{i}") for i in range(3)])
    with client(host) as sb, sb.get_subscription_receiver(
            TOPIC, PARKED, session_id=session, max_wait_time=WAIT) as receiver:
        peeked = receiver.peek_messages(max_message_count=10)
        assert [str(m) for m in peeked] == ["p0", "p1", "p2"]
        numbers = [m.sequence_number for m in peeked]
        assert numbers == sorted(numbers)
        assert all(m.session_id == session for m in peeked)
        later = receiver.peek_messages(max_message_count=10, sequence_number=numbers[1])
        assert [str(m) for m in later] == ["p1", "p2"]
        messages = receive_all(receiver, 3)
        assert [(str(m), m.delivery_count) for m in messages] == [("p0", 0), ("p1", 0), ("p2", 0)]
        for message in messages:
            receiver.complete_message(message)
        assert receiver.peek_messages(max_message_count=10) == []
