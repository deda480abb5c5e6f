'use strict';
// The participant: consumes its command topic with a consumer group and, for
// each record in partition order, in one transaction: dedupes it by its
// message-id (inbox), runs it behind the barrier and writes the reply to the
// outbox; then commits the offset. A record that does not decode or
// validate, or whose effects Postgres refuses, goes to "<topic>.dlq" with a
// dlq-reason header and the partition moves on; a database or broker outage
// is retried as long as it takes, never dead-lettered.

const { Kafka, Partitioners, logLevel } = require('kafkajs');
const { InvalidMessage, headerMap, recordMessageID, decodeCommand, replyRecord, cut } = require('./wire');
const { Relay } = require('./relay');
const { deadLetter, shortDeadLetter, refusedCause } = require('./deadletter');

// Postgres refusing the content (SQLSTATE classes 22 data, 23 integrity,
// 54 limits): the command is dead-lettered, retrying would not help.
const permanent = (e) => e instanceof InvalidMessage || (typeof e.code === 'string' && /^(22|23|54)/.test(e.code));

class Participant {
  // ssl and sasl are kafkajs' options (lib/env.js kafkaSecurity): every
  // client (consumer, producer, admin) is made by this.kafka and uses them.
  // relayMaxAttempts: publish attempts Kafka refuses before an outbox row
  // is parked dead; metrics: lib/metrics.js participantMetrics (or null).
  // signing: lib/sign.js Signing (or null: commands are not verified,
  // replies unsigned).
  constructor({ name, brokers, ssl, sasl, pool, store, steps, replyTopics, partitions, log, relayMaxAttempts, metrics = null, signing = null }) {
    Object.assign(this, { name, pool, store, replyTopics, partitions, log, metrics, signing });
    this.steps = new Map(steps.map((s) => [s.name, s]));
    this.commandTopic = `${name}.commands`;
    this.dlqTopic = `${this.commandTopic}.dlq`;
    this.kafka = new Kafka({ clientId: `${name}-node`, brokers, ssl, sasl, logLevel: logLevel.WARN });
    this.producer = this.kafka.producer({
      createPartitioner: Partitioners.DefaultPartitioner, // murmur2, as the Java client
      allowAutoTopicCreation: false,
      maxInFlightRequests: 1,
      // Few retries inside kafkajs: the relay and the dead-lettering retry
      // on their own (an outage as long as it takes, a refused row after a
      // backoff, counted toward parking), so a refusal reaches them fast.
      retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 1000 },
    });
    this.consumer = this.kafka.consumer({
      groupId: name, sessionTimeout: 10000, rebalanceTimeout: 10000, heartbeatInterval: 1000,
      maxWaitTimeInMs: 250, allowAutoTopicCreation: false,
    });
    this.relay = new Relay({ pool, producer: this.producer, store, log, maxAttempts: relayMaxAttempts, metrics });
    this.stopping = false;
  }

  // ensureTopics creates the command topic, its dead-letter topic and the
  // reply topics if they do not exist (nothing is created by publishing).
  async ensureTopics() {
    const admin = this.kafka.admin();
    await admin.connect();
    try {
      const have = new Set(await admin.listTopics());
      const want = [this.commandTopic, this.dlqTopic, ...this.replyTopics].filter((t) => !have.has(t));
      if (want.length > 0) {
        await admin.createTopics({ waitForLeaders: true, topics: want.map((topic) => ({ topic, numPartitions: this.partitions })) });
      }
    } finally {
      await admin.disconnect();
    }
  }

  async start() {
    await this.store.migrate([...this.steps.values()].flatMap((s) => s.ddl || []));
    await this.ensureTopics();
    await this.producer.connect();
    this.relayDone = this.relay.run();
    await this.consumer.connect();
    await this.consumer.subscribe({ topic: this.commandTopic, fromBeginning: true });
    await this.consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
        let next = null;
        for (const m of batch.messages) {
          if (!isRunning() || isStale() || this.stopping) break;
          await this.handle(batch.topic, batch.partition, m);
          resolveOffset(m.offset);
          next = (BigInt(m.offset) + 1n).toString();
          await heartbeat();
        }
        if (next !== null) await this.consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: next }]);
      },
    });
    this.log('info', 'participant running', { topic: this.commandTopic, group: this.name });
  }

  // handle processes one record until it is applied, skipped as a
  // duplicate or dead-lettered.
  async handle(topic, partition, m) {
    const where = { topic, partition, offset: m.offset };
    let headers;
    let messageID;
    try {
      headers = headerMap(m.headers);
      messageID = recordMessageID(headers);
    } catch (e) {
      return this.deadLetter(where, m, e.message, 'invalid_message');
    }
    for (let attempt = 0; ; attempt++) {
      try {
        const outcome = await this.store.tx(async (c) => {
          if (!(await this.store.claimMessage(c, messageID))) return null; // consumed before
          if (this.signing) this.signing.verifyCommand(topic, m);
          const cmd = decodeCommand(m.value, headers);
          if (!this.replyTopics.includes(cmd.reply_to)) {
            throw new InvalidMessage(`invalid message: field "reply_to" is ${JSON.stringify(cut(cmd.reply_to, 120))}, not one of the reply topics participant ${this.name} answers on (${this.replyTopics.join(', ')})`);
          }
          const res = await this.store.execute(c, cmd, this.steps.get(cmd.step));
          const reply = replyRecord(cmd, res);
          await this.store.enqueue(c, this.signing ? this.signing.signReply(reply) : reply);
          return res.outcome;
        });
        if (this.metrics) {
          if (outcome === null) this.metrics.duplicates.inc(this.metrics.p);
          else this.metrics.commands.inc({ ...this.metrics.p, outcome });
        }
        if (outcome !== null) this.relay.wake();
        return undefined;
      } catch (e) {
        if (permanent(e)) return this.deadLetter(where, m, e.message, e instanceof InvalidMessage ? 'invalid_message' : 'database_refused');
        if (this.stopping) throw e;
        this.log('warn', 'command failed; retrying', { ...where, error: e.message, attempt });
        await new Promise((r) => setTimeout(r, Math.min(100 * 2 ** attempt, 5000)));
      }
    }
  }

  // deadLetter publishes the record to the dead-letter topic (lib/deadletter.js:
  // its key, value and headers and the reason), retrying an outage until the
  // broker takes it; cls is the reason's class for the metrics. A record the
  // broker refuses for what it is (too large, invalid) is replaced by its
  // shortened form (dlq-shortened: true); if that is refused too, it is
  // logged with its coordinates and counted, and the partition moves on.
  async deadLetter(where, m, reason, cls) {
    this.log('warn', 'command dead-lettered', { ...where, reason });
    let rec = deadLetter(where, m, reason);
    let shortened = rec.headers['dlq-shortened'].toString() === 'true';
    for (let attempt = 0; ; attempt++) {
      try {
        await this.producer.send({ topic: this.dlqTopic, acks: -1, messages: [rec] });
        if (this.metrics) {
          this.metrics.deadLettered.inc({ ...this.metrics.p, reason: cls });
          if (shortened) this.metrics.dlqShortened.inc(this.metrics.p);
        }
        return;
      } catch (e) {
        const refused = refusedCause(e);
        if (refused !== null && !shortened) {
          this.log('warn', 'the broker refused a dead-letter record; sending a shortened one', { ...where, error: e.message, type: refused.type });
          rec = shortDeadLetter(where, m, reason);
          shortened = true;
          attempt = -1;
          continue;
        }
        if (refused !== null) {
          if (this.metrics) this.metrics.dlqLost.inc(this.metrics.p);
          this.log('error', 'the broker refused even the shortened dead-letter record; the command is skipped and only this log line keeps it',
            { ...where, reason: cut(reason, 1024), error: e.message, type: refused.type });
          return;
        }
        if (this.stopping) throw e;
        this.log('warn', 'dead letter not published; retrying', { ...where, error: e.message });
        await new Promise((r) => setTimeout(r, Math.min(100 * 2 ** attempt, 5000)));
      }
    }
  }

  // settle records the final outcome of the accepted forward ref
  // ({saga_id, step}) in the transaction of client c and enqueues its reply
  // (signed) in that transaction: the step's later completion or failure,
  // from any code path. It throws NotAccepted (lib/store.js) when the step
  // is not accepted (any more). res: {outcome: 'success' | 'failure',
  // reason, payload}.
  async settle(c, ref, res) {
    const { cmd, rec } = await this.store.settle(c, ref, res);
    const reply = replyRecord(cmd, rec);
    await this.store.enqueue(c, this.signing ? this.signing.signReply(reply) : reply);
  }

  async stop() {
    this.stopping = true;
    await this.consumer.disconnect().catch(() => {});
    this.relay.stop();
    await this.relayDone;
    await this.producer.disconnect().catch(() => {});
  }
}

module.exports = { Participant };
