"""Benchmark: what webhooks cost, on PostgreSQL (run by hand).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench_webhooks python bench/webhooks.py

1. The job paths with and without an active subscription: ``enqueue`` + ``fetch`` +
   ``ack`` of one job at a time, rounds interleaved, median jobs/s. Nothing on these
   paths looks at webhooks, so the two should be the same within noise.
2. The dispatcher (``lifecycle.dispatch_webhooks``, the reaper's step): stored events
   turned into delivery jobs per second, for a subscription to ``job.completed`` (one
   delivery per job) and one to ``*`` (three per job).
Figures are reported in docs/reference/http/webhooks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.enqueue import reset, setup


def cycle(n: int) -> float:
    """jobs/s of ``n`` enqueue + fetch + ack, one job at a time."""
    from django_ojs import lifecycle

    started = time.perf_counter()
    for _ in range(n):
        job = lifecycle.enqueue("bench.hook", [1])
        lifecycle.fetch(["default"], 1)
        lifecycle.ack(job.id, None)
    return n / (time.perf_counter() - started)


def subscribe(events: list[str]) -> None:
    from django_ojs.models import Event, WebhookSubscription
    from django_ojs.webhooks import signing

    last = Event.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    WebhookSubscription.objects.create(
        url="https://hooks.example.com/ojs", events=events, secret=signing.new_secret(),
        since_seq=last,
    )  # fmt: skip


def unsubscribe() -> None:
    from django_ojs import lifecycle
    from django_ojs.models import WebhookSubscription

    WebhookSubscription.objects.all().delete()
    lifecycle.forget_webhooks()


def hot_paths(n: int, rounds: int) -> None:
    without, with_one = [], []
    for _ in range(rounds):
        reset()
        unsubscribe()
        without.append(cycle(n))
        reset()
        subscribe(["job.completed"])
        with_one.append(cycle(n))
        unsubscribe()
    print(
        f"enqueue+fetch+ack, {n} jobs x {rounds} rounds (median jobs/s): "
        f"no subscription {statistics.median(without):,.0f}, "
        f"one active subscription {statistics.median(with_one):,.0f}"
    )


def dispatcher(n: int) -> None:
    from django_ojs import lifecycle
    from django_ojs.lifecycle import webhooks

    webhooks.GAP_WAIT = 0.0  # a fresh table after TRUNCATE: nothing to wait for
    for events in (["job.completed"], ["*"]):
        reset()
        unsubscribe()
        subscribe(events)
        lifecycle.enqueue_many([{"type": "bench.hook", "args": [i]} for i in range(n)])
        done = 0
        while done < n:
            jobs = lifecycle.fetch(["default"], 100, worker_id="bench")
            lifecycle.ack_many([(job.id, job.attempt, None) for job in jobs], worker_id="bench")
            done += len(jobs)
        started = time.perf_counter()
        made = lifecycle.dispatch_webhooks()
        elapsed = time.perf_counter() - started
        print(
            f"dispatch {events}: {made:,} deliveries from {3 * n:,} events in {elapsed:.2f} s "
            f"({made / elapsed:,.0f} deliveries/s)"
        )
        unsubscribe()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    setup()
    hot_paths(args.jobs, args.rounds)
    dispatcher(args.jobs * 5)


if __name__ == "__main__":
    main()
