"""Publish throughput through the AMQP endpoint with Microsoft's Python SDK,
beside the same events through the HTTP API, against one running host.

    python tests/python/bench_publish.py --amqp localhost:5672 --api http://127.0.0.1:7300 \
        --key-name RootManageSharedAccessKey --key KEY [--events 2000]

Prints events/s for single sends, batches of 100, and HTTP publishes, each
the median of three rounds. The figures are the client's: the SDK is pure
Python, so a round measures it as much as the endpoint."""

import argparse
import json
import statistics
import time
import urllib.request
import uuid

from azure.servicebus import ServiceBusClient, ServiceBusMessage


def event(n):
    body = {"EventContent": {"EventTypeId": "OrderPlaced",
                             "EventJson": json.dumps({"OrderId": f"o-{n}", "Total": 1.0})},
            "ErrorContent": None}
    return json.dumps(body)


def amqp_round(args, batch):
    cs = (f"Endpoint=sb://{args.amqp};SharedAccessKeyName={args.key_name};"
          f"SharedAccessKey={args.key};UseDevelopmentEmulator=true;")
    with ServiceBusClient.from_connection_string(cs) as client, \
            client.get_topic_sender(args.topic) as sender:
        started = time.perf_counter()
        for first in range(0, args.events, batch):
            messages = [ServiceBusMessage(event(n), session_id=f"bench-{n % 64}",
                                          message_id=str(uuid.uuid4()),
                                          application_properties={"EventTypeId": "Bench"})
                        for n in range(first, min(first + batch, args.events))]
            sender.send_messages(messages if batch > 1 else messages[0])
        return args.events / (time.perf_counter() - started)


def http_round(args):
    started = time.perf_counter()
    for n in range(args.events):
        body = json.dumps({"event_type": "Bench", "session_id": f"bench-{n % 64}",
                           "data": {"OrderId": f"o-{n}", "Total": 1.0}}).encode()
        request = urllib.request.Request(f"{args.api}/api/publish", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()
    return args.events / (time.perf_counter() - started)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--amqp", required=True)
    parser.add_argument("--api", required=True)
    parser.add_argument("--key-name", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--topic", default="publisher")
    parser.add_argument("--events", type=int, default=2000)
    args = parser.parse_args()
    rounds = {"amqp single": lambda: amqp_round(args, 1),
              "amqp batch 100": lambda: amqp_round(args, 100),
              "http publish": lambda: http_round(args)}
    results = {name: [] for name in rounds}
    for _ in range(3):  # alternated, so drift hits each alike
        for name, run in rounds.items():
            results[name].append(run())
    for name, figures in results.items():
        print(f"{name:16} {statistics.median(figures):8.0f} events/s "
              f"(rounds: {', '.join(f'{f:.0f}' for f in figures)})")


if __name__ == "__main__":
    main()
