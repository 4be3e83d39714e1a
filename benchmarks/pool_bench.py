"""What rendering in a RenderPool costs: latency per render and throughput, against in-process.

    python benchmarks/pool_bench.py [--template PATH] [--seconds 2] [--quick]

Renders a real chat template (``examples/chatml.jinja`` by default) with a 10-message and a
1,000-message conversation through ``ChatTemplate.render`` in this process and through
``RenderPool.render_chat`` with 1 and 2 workers, called from 1, 2 and 4 threads. Prints the
round trip of ``{{ x }}`` (the fixed cost of a call), then per conversation size:

* µs/render: the mean wall time of one render as one caller sees it, best of 5 rounds
  interleaved across the rows so that the machine's other load hits them alike (the overhead is
  the difference to in-process: pickling the data, two pipe transfers, the reply's decoding,
  and waking the worker up);
* caller CPU: CPU µs the calling process spends per render (for the pool: the chat pipeline's
  data steps, pickling, decoding the reply; the render itself runs in a worker);
* total CPU: caller CPU plus the workers' CPU (Linux), the cost that does not depend on how
  busy the machine is: the pool's overhead in CPU is total CPU minus in-process;
* renders/s: throughput of all the calling threads together (best of two runs).

Outputs are checked against the in-process render before timing. The machine's load moves
the numbers; the worker start-up time (spawn to first result) is printed too.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import minijinja_py as mj  # noqa: E402
from minijinja_py.chat.pool import RenderPool  # noqa: E402


def conversation(count: int) -> list:
    messages = [{"role": "system", "content": "You are a concise assistant for a travel site."}]
    for index in range(count - 1):
        if index % 2 == 0:
            messages.append({"role": "user", "content": f"Question {index}: what is there to see"
                                                        f" in city number {index}? " * 3})
        else:
            messages.append({"role": "assistant",
                             "content": f"Answer {index}: the old town, the river and the "
                                        f"museum of modern art. " * 4})
    return messages


def calibrate(render, seconds: float) -> int:
    """How many calls take about ``seconds``."""
    render()
    start = time.perf_counter()
    calls = 0
    while time.perf_counter() - start < 0.05:
        render()
        calls += 1
    return max(1, int(calls * seconds / 0.05))


def workers_cpu(pool) -> float:
    """CPU seconds the pool's workers have used (Linux /proc; 0 elsewhere)."""
    total = 0.0
    for pid in pool.worker_pids() if pool is not None else ():
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            pass
    return total


def timed_batch(render, batch: int, pool=None) -> tuple:
    """(wall µs, this process's CPU µs, this process's + the workers' CPU µs) per call over
    ``batch`` calls."""
    wall, cpu, workers = time.perf_counter(), time.process_time(), workers_cpu(pool)
    for _ in range(batch):
        render()
    caller = (time.process_time() - cpu) / batch * 1e6
    return ((time.perf_counter() - wall) / batch * 1e6, caller,
            caller + (workers_cpu(pool) - workers) / batch * 1e6)


def throughput(render, threads: int, seconds: float) -> float:
    """Renders per second of ``threads`` threads calling ``render`` for ``seconds``."""
    counts = [0] * threads
    stop = time.perf_counter() + seconds
    barrier = threading.Barrier(threads + 1)

    def loop(index: int) -> None:
        barrier.wait()
        done = 0
        while time.perf_counter() < stop:
            render()
            done += 1
        counts[index] = done

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    started = time.perf_counter()
    barrier.wait()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.perf_counter() - started)


ROUNDS = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--template", default=str(HERE.parent / "examples" / "chatml.jinja"))
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="time per measurement (default 2)")
    parser.add_argument("--quick", action="store_true", help="0.5 s per measurement")
    args = parser.parse_args()
    seconds = 0.5 if args.quick else args.seconds
    with open(args.template, encoding="utf-8", newline="") as handle:
        source = handle.read()
    name = os.path.basename(args.template)
    template = mj.ChatTemplate(source)

    print(f"template {name}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "")
    pools = {}
    for processes in (1, 2):
        started = time.perf_counter()
        pools[processes] = RenderPool(processes)
        pools[processes].render_chat(source, conversation(10), add_generation_prompt=True)
        print(f"pool of {processes}: first result {1e3 * (time.perf_counter() - started):.0f} ms "
              "after start (spawn, import, first parse)")
    try:
        # the fixed cost of a round trip: a template that does (almost) nothing
        tiny = mj.chat_environment().from_string("{{ x }}")
        rows = [("in-process", lambda: tiny.render(x=1))] + [
            (f"RenderPool({n})", lambda p=p: p.render("{{ x }}", x=1)) for n, p in pools.items()]
        batches = {label: calibrate(render, seconds / ROUNDS) for label, render in rows}
        best = {label: float("inf") for label, _ in rows}
        for _ in range(ROUNDS):
            for label, render in rows:
                best[label] = min(best[label], timed_batch(render, batches[label])[0])
        print("round trip of '{{ x }}': " + ", ".join(f"{label} {best[label]:,.0f} µs"
                                                       for label, _ in rows))
        header = f"{'messages':>8}  {'how':<18} {'µs/render':>10} {'caller CPU':>10} {'total CPU':>10}  " + "  ".join(
            f"{f'{t} thr r/s':>10}" for t in (1, 2, 4))
        print(header)
        print("-" * len(header))
        for count in (10, 1000):
            messages = conversation(count)
            expected = template.render(messages, add_generation_prompt=True)
            rows = [("in-process", lambda m=messages: template.render(
                m, add_generation_prompt=True))]
            owners = {"in-process": None}
            for processes, pool in pools.items():
                assert pool.render_chat(source, messages, add_generation_prompt=True) == expected
                rows.append((f"RenderPool({processes})", lambda m=messages, p=pool: p.render_chat(
                    source, m, add_generation_prompt=True)))
                owners[f"RenderPool({processes})"] = pool
            # latency: rounds interleaved across the rows, best round of each (the machine's
            # other load hits every row alike); parent CPU: what the calling process spends
            batches = {label: calibrate(render, seconds / ROUNDS) for label, render in rows}
            best = {label: (float("inf"),) * 3 for label, _ in rows}
            for _ in range(ROUNDS):
                for label, render in rows:
                    measured = timed_batch(render, batches[label], owners[label])
                    best[label] = tuple(map(min, best[label], measured))
            for label, render in rows:
                rates = [max(throughput(render, threads, seconds / 2) for _ in range(2))
                         for threads in (1, 2, 4)]
                print(f"{count:>8}  {label:<18} {best[label][0]:>10,.0f} {best[label][1]:>10,.0f}"
                      f" {best[label][2]:>10,.0f}  " + "  ".join(f"{rate:>10,.0f}"
                                                            for rate in rates))
            base_wall, base_cpu = best["in-process"][0], best["in-process"][2]
            for label, _ in rows[1:]:
                print(f"{'':>8}  {label}: {best[label][0] - base_wall:+,.0f} µs wall, "
                      f"{best[label][2] - base_cpu:+,.0f} µs CPU per render over in-process")
            print(f"{'':>8}  ({len(expected):,} chars of output)")
    finally:
        for pool in pools.values():
            pool.close()


if __name__ == "__main__":
    main()
