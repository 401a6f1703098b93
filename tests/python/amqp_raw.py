"""A client of AMQP 1.0 written by hand, frame by frame, to send what no
SDK would: values nested thousands deep, transfers never finished,
connections that never put a token (issue 40's probes). It encodes the few
types the probes need (AMQP 1.0 part 1, 1.6) and reads frames whole."""

import socket
import ssl
import struct

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"

OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
SASL_INIT, SASL_OUTCOME = 0x41, 0x44


# Encodings: each returns the bytes of one value.
def null():
    return b"\x40"


def boolean(value):
    return b"\x41" if value else b"\x42"


def uint(value):
    return b"\x70" + struct.pack(">I", value)


def ubyte(value):
    return b"\x50" + struct.pack(">B", value)


def string(text):
    data = text.encode()
    return b"\xb1" + struct.pack(">I", len(data)) + data


def symbol(text):
    data = text.encode()
    return b"\xb3" + struct.pack(">I", len(data)) + data


def binary(data):
    return b"\xb0" + struct.pack(">I", len(data)) + data


def listed(*items):
    body = b"".join(items)
    return b"\xd0" + struct.pack(">II", len(body) + 4, len(items)) + body


def mapped(*pairs):
    body = b"".join(k + v for k, v in pairs)
    return b"\xd1" + struct.pack(">II", len(body) + 4, 2 * len(pairs)) + body


def described(code, value):
    return b"\x00\x53" + bytes([code]) + value


def nested(levels):
    """A described value nested `levels` deep, around a null: 3 bytes a level."""
    return b"\x00\x53\x01" * levels + b"\x40"


def frame(performative, payload=b"", channel=0, kind=0):
    body = performative + payload
    return struct.pack(">IBBH", len(body) + 8, 2, kind, channel) + body


def open_frame(container="probe", hostname="localhost", properties=None):
    fields = [string(container), string(hostname), uint(65536), null(), null(), null(), null(), null(), null()]
    if properties is not None:
        fields.append(properties)
    return frame(described(OPEN, listed(*fields)))


def begin_frame(channel=0):
    return frame(described(BEGIN, listed(null(), uint(0), uint(1000), uint(1000), uint(1023))), channel=channel)


def attach_frame(name, handle, address, sender=True, properties=None, channel=0):
    """An attach in which the client sends to `address` (or receives from it)."""
    source = described(0x28, listed(string(address if not sender else name)))
    target = described(0x29, listed(string(address if sender else name)))
    fields = [
        string(name), uint(handle), boolean(not sender), ubyte(0), ubyte(0),
        source, target, null(), boolean(False), uint(0) if sender else null(), null(), null(), null(),
    ]
    if properties is not None:
        fields.append(properties)
    return frame(described(ATTACH, listed(*fields)), channel=channel)


def transfer_frame(handle, delivery_id, payload, more=False, settled=False, channel=0):
    performative = described(
        TRANSFER,
        listed(uint(handle), uint(delivery_id), binary(struct.pack(">I", delivery_id)), uint(0), boolean(settled), boolean(more)),
    )
    return frame(performative, payload, channel=channel)


def amqp_value(value):
    """A message of one amqp-value section."""
    return described(0x77, value)


class Raw:
    """One connection, spoken by hand."""

    def __init__(self, address, tls_ca=None, timeout=10):
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        if tls_ca is not None:
            context = ssl.create_default_context(cafile=tls_ca)
            sock = context.wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.buffer = b""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self, want):
        while len(self.buffer) < want:
            chunk = self.sock.recv(65536)
            if not chunk:
                return False
            self.buffer += chunk
        return True

    def read_header(self):
        if not self._fill(8):
            return None
        header, self.buffer = self.buffer[:8], self.buffer[8:]
        return header

    def read_frame(self):
        """The next frame as (channel, body), or None at the end."""
        if not self._fill(8):
            return None
        size, doff, _, channel = struct.unpack(">IBBH", self.buffer[:8])
        if not self._fill(size):
            return None
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return channel, data[doff * 4:]

    def frames_until_end(self):
        """Every frame the endpoint sends until it closes the connection;
        a reset counts as the end."""
        frames = []
        try:
            while (read := self.read_frame()) is not None:
                frames.append(read)
        except (ConnectionResetError, ssl.SSLError, socket.timeout):
            pass
        return frames

    def sasl_anonymous(self):
        self.send(SASL_HEADER)
        assert self.read_header() == SASL_HEADER
        assert self.read_frame() is not None  # mechanisms
        init = described(SASL_INIT, listed(symbol("ANONYMOUS")))
        self.send(frame(init, kind=1))
        outcome = self.read_frame()
        assert outcome is not None and outcome[1][:3] == b"\x00\x53\x44", outcome
        self.send(AMQP_HEADER)
        assert self.read_header() == AMQP_HEADER

    def open(self, properties=None):
        """SASL, and an open (with `properties`, if given); the endpoint's
        open, or None if it answered otherwise."""
        self.sasl_anonymous()
        self.send(open_frame(properties=properties))
        if properties is not None:
            return None
        answer = self.read_frame()
        assert answer is not None and answer[1][:3] == b"\x00\x53\x10", answer
        return answer

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def closed_with(frames, condition):
    """Whether `frames` end with a close carrying `condition`."""
    return any(body[:3] == b"\x00\x53\x18" and condition.encode() in body for _, body in frames)
