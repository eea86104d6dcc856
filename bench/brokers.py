"""Exactly-once word count from real streams: drpc Trident against plain consumer loops.

The words of ``bench/transactional.py`` (a seeded Zipf draw over a 20 000-word
vocabulary), 1 000 000 by default, spread over 4 partitions of each broker:
4 Redis stream keys, 4 JetStream streams, on servers this bench starts on
free loopback ports (Debian's ``redis-server`` and ``nats-server``, as the
tests do). Side by side in one run, every final count checked against the
input:

- ``trident_redis``: ``new_stream(RedisStreamsTransactionalSpout).group_by(
  word).persistent_aggregate(LMDBMapState.transactional, Count())`` on Spark
  with defaults (``executor="spark"``: Trident's compiled path on the
  resident tasks; the driver decides each partition's id range, the
  executors read the entries; 3 batches in flight), ``--batch`` entries a
  batch (100 000: 25 000 per partition);
- ``plain_redis``, its baseline and the limit: one consumer loop as a
  competent user writes it: redis-py ``XREAD COUNT`` over the 4 streams
  (``--batch`` entries a round), a ``Counter`` a batch and one durable LMDB
  transaction a batch into a ``TransactionalMap``;
- ``trident_nats``: the same Trident word count from
  ``JetStreamTransactionalSpout`` (the driver reads each stream's last
  sequence, the executors pull the ranges);
- ``plain_nats``, its baseline: the same consumer loop over JetStream, with
  the fastest reading the spout knows (a pull consumer per stream delivering
  into a plain subscription, ``--batch`` messages a round);
  ``plain_nats_fetch``: the loop written with nats-py's documented
  ``pull_subscribe(...).fetch(n)`` instead, for reference.

Before the measured runs, one Trident run counts other words from Redis,
unmeasured (``--warm-up-words``, 200 000): the JVM compiles Spark's hot paths
as they run. Loading the brokers is not measured. Ratios are Trident's
words/s over its broker's plain loop (the target: ``trident_redis`` at
>= 0.5x ``plain_redis``).

Usage: ``python bench/brokers.py [--words N] [--batch N] [--warm-up-words N]
[--skip-nats] [--out FILE]``; prints a table and writes JSON (default
``bench/results/brokers.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import transactional as baseline  # noqa: E402  (bench/transactional.py)

from drpc import Fields, runtime  # noqa: E402
from drpc.progress import Progress  # noqa: E402
from drpc.state import StateEnvironment, TransactionalMap  # noqa: E402
from drpc.transactional.jetstream import JetStreamTransactionalSpout  # noqa: E402
from drpc.transactional.loop_thread import LoopThread  # noqa: E402
from drpc.transactional.redis_streams import RedisStreamsTransactionalSpout  # noqa: E402
from drpc.trident import Count, LMDBMapState, TridentTopology, run  # noqa: E402
from tests.brokers import NatsServer, RedisServer, add_words  # noqa: E402

PARTITIONS = 4
MAP = "bench-broker-counts"


def draw(words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    vocabulary = [f"w{n}" for n in range(20_000)]
    weights = [1 / (n + 1) for n in range(len(vocabulary))]
    return rng.choices(vocabulary, weights, k=words)


def load_redis(server: RedisServer, prefix: str, words: list[str]) -> None:
    with server.client() as client:
        for partition in range(PARTITIONS):
            add_words(client, f"{prefix}:{partition}", words[partition::PARTITIONS])


def load_nats(server: NatsServer, prefix: str, words: list[str]) -> None:
    names = [f"{prefix}_{partition}" for partition in range(PARTITIONS)]
    server.create_streams(*names)
    for partition, name in enumerate(names):
        server.publish(name, words[partition::PARTITIONS])


def trident(spout: Any, name: str) -> TridentTopology:
    topology = TridentTopology()
    topology.new_stream(name, spout, parallelism=2).group_by(["word"]).persistent_aggregate(
        LMDBMapState.transactional(MAP), Count(), ["count"]
    )
    return topology


def checked(label: str, state_dir: Path, expected: Counter[str]) -> None:
    counts = dict(TransactionalMap(StateEnvironment.open(str(state_dir)), MAP).items())
    assert counts == dict(expected), f"{label} counted wrongly"


def bench_trident(
    label: str, spout: Any, state_dir: Path, expected: Counter[str]
) -> dict[str, Any]:
    progress = Progress(sys.stderr, interval=10)
    started = time.perf_counter()
    result = run(
        trident(spout, label.replace("_", "-")),
        state_dir=str(state_dir),
        executor="spark",
        max_spout_pending=3,
        on_commit=lambda info: progress.update(f"{label}: txid {info.txid}"),
    )
    return baseline.checked_run(label, result, started, progress, state_dir, MAP, expected)


class _Sink:
    """One LMDB transaction per batch into a TransactionalMap: the plain loops' state."""

    def __init__(self, state_dir: Path) -> None:
        self.env = StateEnvironment.open(str(state_dir))
        self.counts = TransactionalMap(self.env, MAP, default=0)
        self.txid = 0
        self.tuples = 0

    def commit(self, batch: Counter[str]) -> None:
        self.txid += 1
        self.tuples += sum(batch.values())
        self.env.run_write(
            lambda txn: self.counts.handle(txn, self.txid).multi_update(
                {w: (lambda v, n=n: v + n) for w, n in batch.items()}
            )
        )

    def record(
        self, label: str, started: float, state_dir: Path, expected: Counter[str]
    ) -> dict[str, Any]:
        elapsed = time.perf_counter() - started
        checked(label, state_dir, expected)
        return {
            "seconds": elapsed,
            "tuples": self.tuples,
            "batches": self.txid,
            "tuples_per_s": self.tuples / elapsed,
        }


def bench_plain_redis(
    server: RedisServer, prefix: str, batch: int, state_dir: Path, expected: Counter[str]
) -> dict[str, Any]:
    sink = _Sink(state_dir)
    positions = {f"{prefix}:{p}": "0-0" for p in range(PARTITIONS)}
    started = time.perf_counter()
    with server.client() as client:
        while True:
            reply = client.xread(positions, count=batch // PARTITIONS)
            if not reply:
                break
            counts: Counter[str] = Counter()
            for key, entries in reply:
                counts.update(fields[b"word"].decode() for _, fields in entries)
                positions[key.decode()] = entries[-1][0]
            sink.commit(counts)
    return sink.record("plain_redis", started, state_dir, expected)


def bench_plain_nats(
    server: NatsServer,
    prefix: str,
    batch: int,
    state_dir: Path,
    expected: Counter[str],
    fetch: bool,
) -> dict[str, Any]:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    sink = _Sink(state_dir)
    names = [f"{prefix}_{p}" for p in range(PARTITIONS)]
    share = batch // PARTITIONS
    positions = [0] * PARTITIONS  # messages read from each stream

    async def loop() -> None:
        nc = await nats.connect(server.url, user=server.user, password=server.password)
        js = nc.jetstream()
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE, inactive_threshold=60
        )
        if fetch:
            subscriptions = [
                await js.pull_subscribe(name, durable=None, stream=name, config=config)
                for name in names
            ]
        else:
            consumers = [await js.add_consumer(name, config) for name in names]
        while True:
            counts: Counter[str] = Counter()
            for index, name in enumerate(names):
                pending = (await js.stream_info(name)).state.last_seq - positions[index]
                want = min(share, pending)
                if want <= 0:
                    continue
                if fetch:
                    messages = await subscriptions[index].fetch(want, timeout=30)
                    counts.update(m.data.decode() for m in messages)
                else:
                    payloads = await pull(nc, name, consumers[index].name, want)
                    counts.update(data.decode() for data in payloads)
                positions[index] += want
            if not counts:
                break
            sink.commit(counts)
        await nc.close()

    async def pull(nc: Any, stream: str, consumer: str, want: int) -> list[bytes]:
        payloads: list[bytes] = []
        done = asyncio.get_running_loop().create_future()

        async def received(msg: Any) -> None:
            if msg.reply:
                payloads.append(msg.data)
                if len(payloads) == want and not done.done():
                    done.set_result(None)

        inbox = nc.new_inbox()
        subscription = await nc.subscribe(inbox, cb=received, pending_msgs_limit=-1)
        request = json.dumps({"batch": want, "expires": 30_000_000_000}).encode()
        await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", request, reply=inbox)
        await asyncio.wait_for(done, 60)
        await subscription.unsubscribe()
        return payloads

    thread = LoopThread("bench-nats")
    started = time.perf_counter()
    try:
        thread.run(loop(), None)
    finally:
        thread.close()
    label = "plain_nats_fetch" if fetch else "plain_nats"
    return sink.record(label, started, state_dir, expected)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--warm-up-words", type=int, default=200_000)
    parser.add_argument("--skip-nats", action="store_true")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "brokers.json")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="drpc-bench-brokers-"))
    redis = RedisServer(work / "redis")
    nats = NatsServer(work / "nats")
    results: dict[str, Any] = {}
    take = args.batch // PARTITIONS
    try:
        redis.start()
        words = draw(args.words, 2012)
        expected = Counter(words)
        print(f"loading {args.words} words into redis and jetstream ...", flush=True)
        load_redis(redis, "words", words)
        if not args.skip_nats:
            nats.start()
            load_nats(nats, "WORDS", words)
        session = runtime.get_session()
        results["environment"] = baseline.spark_environment(session)
        results.update(words=args.words, batch=args.batch, warm_up_words=args.warm_up_words)
        if args.warm_up_words:
            warm = draw(args.warm_up_words, 7)
            load_redis(redis, "warm", warm)
            spout = RedisStreamsTransactionalSpout(
                redis.url, "warm:{}", Fields("word"), take, password=redis.password
            )
            bench_trident("warm_up", spout, work / "state-warm", Counter(warm))
        spout = RedisStreamsTransactionalSpout(
            redis.url, "words:{}", Fields("word"), take, password=redis.password
        )
        results["trident_redis"] = bench_trident(
            "trident_redis", spout, work / "state-trident-redis", expected
        )
        results["plain_redis"] = bench_plain_redis(
            redis, "words", args.batch, work / "state-plain-redis", expected
        )
        if not args.skip_nats:
            spout = JetStreamTransactionalSpout(
                nats.url,
                "WORDS_{}",
                Fields("word"),
                take,
                username=nats.user,
                password=nats.password,
            )
            results["trident_nats"] = bench_trident(
                "trident_nats", spout, work / "state-trident-nats", expected
            )
            results["plain_nats"] = bench_plain_nats(
                nats, "WORDS", args.batch, work / "state-plain-nats", expected, fetch=False
            )
            results["plain_nats_fetch"] = bench_plain_nats(
                nats, "WORDS", args.batch, work / "state-plain-fetch", expected, fetch=True
            )
    finally:
        redis.stop()
        nats.stop()
        shutil.rmtree(work, ignore_errors=True)
    for trident_key, plain_key in (
        ("trident_redis", "plain_redis"),
        ("trident_nats", "plain_nats"),
    ):
        if trident_key in results and plain_key in results:
            ratio = results[trident_key]["tuples_per_s"] / results[plain_key]["tuples_per_s"]
            results[trident_key]["ratio_to_plain"] = ratio
    args.out.write_text(json.dumps(results, indent=2))
    rows = (
        ("trident_redis", "drpc Trident from Redis Streams, Spark"),
        ("plain_redis", "plain XREAD loop + Counter + LMDB txn a batch"),
        ("trident_nats", "drpc Trident from JetStream, Spark"),
        ("plain_nats", "plain JetStream pull loop + Counter + LMDB txn"),
        ("plain_nats_fetch", "the same loop with nats-py fetch()"),
    )
    width = max(len(label) for _, label in rows) + 2
    print(f"{'run':<{width}}{'seconds':>9}{'batches':>9}{'words/s':>11}{'ratio':>8}")
    for key, label in rows:
        if key in results:
            r = results[key]
            ratio = f"{r['ratio_to_plain']:.2f}x" if "ratio_to_plain" in r else ""
            print(
                f"{label:<{width}}{r['seconds']:>9.1f}{r['batches']:>9}"
                f"{r['tuples_per_s']:>11.0f}{ratio:>8}"
            )
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
