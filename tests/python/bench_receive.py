"""Publish -> receive -> complete through the AMQP endpoint with Microsoft's
Python SDK: one sender publishes `--events` messages over `--sessions`
sessions, at most `--window` of them not completed yet, while session
receivers take the next available session, receive and complete. Prints one
JSON line: messages per second (first publish to
last complete) and the publish-to-complete latency's median and p99 in ms.

    python tests/python/bench_receive.py --amqp localhost:5672 --key-name K --key S \
        --topic bench --subscription sessions [--events 2000] [--sessions 16] [--receivers 16] \
        [--window 64]

`host/servicebus/benches/roundtrip.rs` runs it beside the same loop in process
(`cargo bench -p nimbus-servicebus --bench roundtrip`)."""

import argparse
import json
import resource
import statistics
import threading
import time
import uuid

from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import OperationTimeoutError


def connection_string(args):
    return (f"Endpoint=sb://{args.amqp};SharedAccessKeyName={args.key_name};"
            f"SharedAccessKey={args.key};UseDevelopmentEmulator=true;")


def publish(args, sent_at, completed, lock):
    with ServiceBusClient.from_connection_string(connection_string(args)) as client, \
            client.get_topic_sender(args.topic) as sender:
        for n in range(args.events):
            # A closed loop: at most `--window` messages published and not
            # completed, so the latency is the pipeline's, not a queue's.
            while True:
                with lock:
                    if n - len(completed) < args.window:
                        break
                time.sleep(0.0005)
            message_id = str(uuid.uuid4())
            sent_at[message_id] = time.perf_counter()
            sender.send_messages(ServiceBusMessage(
                b"x" * args.payload, session_id=f"bench-{n % args.sessions}",
                message_id=message_id))


def receive(args, latencies, done, lock):
    with ServiceBusClient.from_connection_string(connection_string(args)) as client:
        while True:
            with lock:
                if len(latencies) >= args.events:
                    return
            try:
                with client.get_subscription_receiver(
                        args.topic, args.subscription, session_id=NEXT_AVAILABLE_SESSION,
                        max_wait_time=2, prefetch_count=args.prefetch) as receiver:
                    while batch := receiver.receive_messages(max_message_count=args.prefetch,
                                                             max_wait_time=1):
                        for message in batch:
                            receiver.complete_message(message)
                            finished = time.perf_counter()
                            with lock:
                                latencies.append((str(message.message_id), finished))
            except OperationTimeoutError:
                if done.is_set():
                    with lock:
                        if len(latencies) >= args.events:
                            return


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--amqp", required=True)
    parser.add_argument("--key-name", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--subscription", required=True)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--receivers", type=int, default=16)
    parser.add_argument("--prefetch", type=int, default=1)
    parser.add_argument("--payload", type=int, default=300)
    parser.add_argument("--window", type=int, default=64)
    args = parser.parse_args()

    sent_at, completed, lock, done = {}, [], threading.Lock(), threading.Event()
    receivers = [threading.Thread(target=receive, args=(args, completed, done, lock))
                 for _ in range(args.receivers)]
    started = time.perf_counter()
    for thread in receivers:
        thread.start()
    publish(args, sent_at, completed, lock)
    done.set()
    for thread in receivers:
        thread.join(timeout=600)
    elapsed = max(finished for _, finished in completed) - started
    latencies = sorted((finished - sent_at[message_id]) * 1000 for message_id, finished in completed)
    print(json.dumps({
        "messages": len(completed),
        "per_second": round(len(completed) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
        # The SDK is pure Python: how busy the client was says how much of
        # the figure is the client's.
        "client_cpu_s": round(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]), 2),
        "elapsed_s": round(elapsed, 2),
    }))


if __name__ == "__main__":
    main()
