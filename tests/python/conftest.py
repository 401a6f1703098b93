"""Where the host under test is: set by tests/tests/all/amqp_sdks.rs, which
starts `nimbus run` with an AMQP endpoint and runs this suite against it."""

import os

import pytest


@pytest.fixture(scope="session")
def host():
    return {
        "amqp": os.environ["NIMBUS_TEST_AMQP"],
        "api": os.environ["NIMBUS_TEST_API"],
        "key_name": os.environ["NIMBUS_TEST_KEY_NAME"],
        "key": os.environ["NIMBUS_TEST_KEY"],
        "pid": int(os.environ["NIMBUS_TEST_PID"]),
        "log": os.environ["NIMBUS_TEST_LOG"],
        "send_key_name": os.environ["NIMBUS_TEST_SEND_KEY_NAME"],
        "send_key": os.environ["NIMBUS_TEST_SEND_KEY"],
        "listen_key_name": os.environ["NIMBUS_TEST_LISTEN_KEY_NAME"],
        "listen_key": os.environ["NIMBUS_TEST_LISTEN_KEY"],
    }


@pytest.fixture(scope="session")
def tls_host(host):
    """A second host serving its AMQP endpoint over TLS (`[amqp]
    tls_certificate`, `tls_key`: a certificate for `localhost` from a test
    authority, whose certificate is at `ca`)."""
    return {
        **host,
        "amqps": os.environ["NIMBUS_TEST_AMQPS"],
        "ca": os.environ["NIMBUS_TEST_CA"],
        "pid": int(os.environ["NIMBUS_TEST_TLS_PID"]),
    }
