"""Microsoft's Python SDK over TLS, as it reaches a namespace (no
`UseDevelopmentEmulator=true`), against `nimbus run` serving `[amqp]` with
a certificate: trusted through `connection_verify`, sends, schedules and
cancels work as over plain AMQP; with only the SDK's own authorities, the
handshake is refused."""

from datetime import datetime, timedelta, timezone

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType
from azure.servicebus.exceptions import ServiceBusConnectionError


def tls_client(tls_host, **kwargs):
    # A namespace's connection string; the SDK goes to 5671 unless given
    # the address, and with an address it needs telling to speak AMQP
    # (not WebSockets).
    return ServiceBusClient.from_connection_string(
        f"Endpoint=sb://localhost/;SharedAccessKeyName={tls_host['key_name']};"
        f"SharedAccessKey={tls_host['key']}",
        custom_endpoint_address=f"sb://{tls_host['amqps']}",
        transport_type=TransportType.Amqp,
        **kwargs,
    )


def test_a_trusted_certificate_carries_sends_and_management(tls_host):
    with tls_client(tls_host, connection_verify=tls_host["ca"]) as client:
        with client.get_topic_sender("publisher") as sender:
            sender.send_messages(ServiceBusMessage(b"over tls", session_id="tls-1"))
            later = datetime.now(timezone.utc) + timedelta(hours=1)
            (number,) = sender.schedule_messages(
                ServiceBusMessage(b"later", session_id="tls-1"), later
            )
            assert number > 0
            sender.cancel_scheduled_messages(number)


def test_a_certificate_the_sdk_does_not_trust_is_refused(tls_host):
    with tls_client(tls_host, retry_total=0) as client:
        # The sender connects as it opens.
        with pytest.raises(ServiceBusConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            with client.get_topic_sender("publisher") as sender:
                sender.send_messages(ServiceBusMessage(b"refused", session_id="tls-2"))
