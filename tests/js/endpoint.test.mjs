// Microsoft's JavaScript SDK (`@azure/service-bus`, pinned in
// package-lock.json) against the AMQP endpoint of the real `nimbus run`:
// what the SDK does differently from the Python one, each of which failed
// before the endpoint took it (issue 39). Run by
// tests/tests/all/amqp_sdks.rs with `node --test`, against the host the
// Python suite runs against; `NIMBUS_JS_ENV` is the directory
// scripts/js-env.sh installed the SDK in.
//
// The messages go where NimBus parks events for a blocked session: the
// `billing` topic's `Deferred` subscription, which the host reads only when
// it unblocks a session, so these receivers are the only ones on it.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { createRequire } from "node:module";
import { test } from "node:test";

const require = createRequire(`${process.env.NIMBUS_JS_ENV}/`);
const { ServiceBusClient } = require("@azure/service-bus");

const TOPIC = "billing";
const PARKED = "Deferred";
const connectionString =
  `Endpoint=sb://${process.env.NIMBUS_TEST_AMQP};` +
  `SharedAccessKeyName=${process.env.NIMBUS_TEST_KEY_NAME};` +
  `SharedAccessKey=${process.env.NIMBUS_TEST_KEY};UseDevelopmentEmulator=true;`;

/** A client that does not retry: a refusal shows at once, as itself. */
function client() {
  return new ServiceBusClient(connectionString, {
    retryOptions: { maxRetries: 0, timeoutInMs: 10_000 },
  });
}

/** A message as NimBus parks it behind a blocked session. */
function parked(session, body) {
  return {
    body,
    sessionId: session,
    messageId: randomUUID(),
    applicationProperties: { To: "Deferred", OriginalSessionId: session },
  };
}

async function publish(sb, ...messages) {
  const sender = sb.createSender(TOPIC);
  await sender.sendMessages(messages);
  await sender.close();
}

/** Settles `promise` or says it did not within `ms`. */
function within(promise, ms) {
  return Promise.race([
    promise.then(() => "settled"),
    new Promise((resolve) => setTimeout(() => resolve("timed out"), ms)),
  ]);
}

test("a new sender schedules and a new receiver peeks with the token the SDK put for $management", async () => {
  // The SDK puts its token for `<entity>/$management` only, and expects
  // it to cover the entity.
  const sb = client();
  try {
    const sender = sb.createSender(TOPIC);
    const later = new Date(Date.now() + 3_600_000);
    const sequences = await sender.scheduleMessages(parked(`js-sched-${randomUUID()}`, "later"), later);
    assert.equal(sequences.length, 1);
    await sender.cancelScheduledMessages(sequences);
    const receiver = sb.createReceiver(TOPIC, PARKED, { subQueueType: "deadLetter" });
    const peeked = await receiver.peekMessages(5);
    assert.ok(Array.isArray(peeked));
  } finally {
    await sb.close();
  }
});

test("deadLetterMessage keeps its reason and description", async () => {
  // rhea writes the error's info keys as strings; the endpoint used to
  // drop the connection on them.
  const session = `js-dead-${randomUUID()}`;
  const sb = client();
  try {
    await publish(sb, parked(session, "bad"), parked(session, "good"));
    const receiver = await sb.acceptSession(TOPIC, PARKED, session);
    const [bad] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5_000 });
    assert.equal(bad.body, "bad");
    await receiver.deadLetterMessage(bad, {
      deadLetterReason: "BadData",
      deadLetterErrorDescription: "the total does not add up",
    });
    // The connection goes on: the next message comes on the same receiver.
    const [good] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5_000 });
    assert.equal(good.body, "good");
    await receiver.completeMessage(good);
    await receiver.close();

    const deadLetters = sb.createReceiver(TOPIC, PARKED, { subQueueType: "deadLetter" });
    let found;
    const deadline = Date.now() + 30_000;
    while (!found && Date.now() < deadline) {
      for (const message of await deadLetters.receiveMessages(10, { maxWaitTimeInMs: 1_000 })) {
        if (message.sessionId === session) found = message;
        await deadLetters.completeMessage(message);
      }
    }
    assert.ok(found, "the message is in the dead-letter queue");
    assert.equal(found.body, "bad");
    assert.equal(found.deadLetterReason, "BadData");
    assert.equal(found.deadLetterErrorDescription, "the total does not add up");
  } finally {
    await sb.close();
  }
});

test("close settles every time", async () => {
  // The endpoint used to drop the connection without answering the
  // client's close now and then, and `close()` never settled.
  const outcomes = [];
  for (let round = 0; round < 20; round += 1) {
    const sb = client();
    const receiver = await sb.acceptSession(TOPIC, PARKED, `js-close-${randomUUID()}`);
    await receiver.receiveMessages(1, { maxWaitTimeInMs: 100 });
    outcomes.push(await within(sb.close(), 10_000));
  }
  assert.deepEqual(
    outcomes.filter((outcome) => outcome !== "settled"),
    [],
    `closes that never settled: ${outcomes}`,
  );
});
