"""Live rank output against ``%%px --stream`` on the same engines, measured in one run.

Run: .venv/bin/python bench/bench_output.py   (not a test; prints its figures)

A real kernel (jupyter_client, as a notebook's server reads it) runs 4 ranks. Each rank prints
its clock LINES times, flushing each line; the client notes when each line reaches it.

1. delay from print on a rank to the line in the notebook: ours vs ``%%px --stream``
   (targets: median <= 5 ms and <= 3x %%px --stream)
2. 10,000 lines x 4 ranks: every line kept, labelled and in order per rank, vs %%px --stream,
   cells alternated (target <= 1.0x); the processor time of the ranks and of the kernel per
   cell (what load does not change), each side
3. 200,000 lines on one rank: every line kept, and the next cell gets its own output
4. a warm round trip (``x = 1``) in this kernel, as a notebook times it (execute request to
   idle status): ours vs ``%%px`` on the same engines, cells alternated (target <= 1.0x)
"""

from __future__ import annotations

import os
import re
import statistics
import time

from common import SPEC, alternated

RANKS = 4
BURSTS = 15  # pairs of 10,000-line cells
LINES = 40  # stamped lines per rank
PAUSE = 0.05  # seconds between them
STAMP = re.compile(r"STAMP (\d+\.\d+)")
PX_LINE = re.compile(r"(\[stdout:\d+\] )?\d+$")  # %%px --stream names the stream on its first line
PRINT_STAMPS = (
    "import time\n"
    f"for i in range({LINES}):\n"
    "    print('STAMP', repr(time.time()), flush=True)\n"
    f"    time.sleep({PAUSE})"
)


def run(kc, code: str, on_message=None, timeout: float = 600) -> list[dict]:
    msg_id = kc.execute(code)
    messages = []
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return messages
        if on_message is not None:
            on_message(msg, time.time())
        messages.append(msg)


def text_of(msg: dict) -> str:
    if msg["msg_type"] == "stream":
        return msg["content"]["text"]
    if msg["msg_type"] in ("display_data", "update_display_data"):
        return msg["content"]["data"].get("text/plain", "")
    return ""


def delays(kc, code: str) -> list[float]:
    """Seconds from each stamped print to its arrival (%%px --stream resends a rank's whole
    stream with each update: a stamp counts when first seen)."""
    seen: set[str] = set()
    found: list[float] = []

    def note(msg: dict, now: float) -> None:
        for stamp in STAMP.findall(text_of(msg)):
            if stamp not in seen:
                seen.add(stamp)
                found.append(now - float(stamp))

    run(kc, code, note)
    return found


def round_trips(kc, pairs: int = 100) -> tuple[float, float, float]:
    """Medians: ours/%%px per pair of cells, ours (s), %%px (s)."""
    return alternated(
        lambda: run(kc, "%%distcomp run bench\nx = 1"), lambda: run(kc, "%%px\nx = 1"), pairs
    )


def count_lines(messages: list[dict], lines: int) -> tuple[int, bool]:
    text = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    per_rank: dict[int, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"\[rank (\d+)\] (.*)", line)
        if match:
            per_rank.setdefault(int(match[1]), []).append(match[2])
    in_order = all(per_rank.get(r) == [str(i) for i in range(lines)] for r in per_rank)
    return sum(len(v) for v in per_rank.values()), in_order


def px_lines(messages: list[dict]) -> int:
    """Lines %%px --stream showed: the last state of each rank's display."""
    last: dict[str, str] = {}
    for m in messages:
        if m["msg_type"] in ("display_data", "update_display_data"):
            key = m["content"].get("transient", {}).get("display_id", "")
            last[key] = text_of(m)
    return sum(1 for text in last.values() for ln in text.splitlines() if PX_LINE.match(ln))


def processes(km) -> dict[str, list]:
    """The kernel's process, and its ranks' (ipyparallel engines started by engine_start)."""
    import psutil

    kernel = psutil.Process(km.provisioner.pid)
    ranks = [
        p
        for p in kernel.children(recursive=True)
        if any(arg.endswith("rank_side.engine_start") for arg in p.cmdline()[1:3])
    ]
    return {"ranks": ranks, "kernel": [kernel]}


def processor_time(procs: dict[str, list]) -> dict[str, float]:
    return {k: sum(sum(p.cpu_times()[:2]) for p in ps) for k, ps in procs.items()}


def bursts(km, kc, pairs: int = BURSTS) -> str:
    """10,000 lines printed on each rank, ours and %%px --stream alternated ``pairs`` times
    (which goes first alternating): the median ratio of their times, and each side's
    median time and mean processor time (ranks, kernel) per cell. Each of our cells must show
    every line, labelled and in order."""
    code = "for i in range(10_000):\n    print(i)"
    procs = processes(km)
    cells = {"ours": f"%%distcomp run bench\n{code}", "px": f"%%px --stream\n{code}"}
    took: dict[str, list[float]] = {"ours": [], "px": []}
    used: dict[str, list[dict[str, float]]] = {"ours": [], "px": []}
    ours_ok, px_got = True, []
    for i in range(pairs):
        for side in ("ours", "px")[:: 1 if i % 2 else -1]:
            before = processor_time(procs)
            tic = time.perf_counter()
            messages = run(kc, cells[side])
            took[side].append(time.perf_counter() - tic)
            after = processor_time(procs)
            used[side].append({k: after[k] - before[k] for k in after})
            if side == "ours":
                got, in_order = count_lines(messages, 10_000)
                ours_ok = ours_ok and got == RANKS * 10_000 and in_order
            else:
                px_got.append(px_lines(messages))
    ratio = statistics.median(o / p for o, p in zip(took["ours"], took["px"], strict=True))

    def side(name: str) -> str:
        # the mean: the system counts processor time in ticks of 10 ms
        cpu = {k: statistics.fmean(u[k] for u in used[name]) for k in used[name][0]}
        return (
            f"{statistics.median(took[name]):5.3f} s (processor: ranks {cpu['ranks']:.3f} s, "
            f"kernel {cpu['kernel']:.3f} s)"
        )

    return (
        f"10,000 lines x {RANKS} ranks, {pairs} pairs:  ratio {ratio:.2f} (target <= 1.0x)   "
        f"ours {side('ours')}, {'every line, labelled, in order' if ours_ok else 'LINES LOST'}"
        f"   %%px --stream {side('px')}, {min(px_got)} to {max(px_got)} lines"
        f"   load {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    try:
        run(kc, "%load_ext jupyter_distcomp")
        run(kc, f"%%distcomp bench\n{SPEC}")
        run(
            kc,
            "bench.runsettings.resource_layout.configure(instance_count=1, "
            f"process_count_per_node={RANKS})",
        )
        run(kc, "%%distcomp run bench\nx = 1")
        run(
            kc,
            "from jupyter_distcomp.local.ranks.backend import get_backend\n"
            "view = get_backend().world('bench').client[:]\n"
            "view.block = True\n"
            "view.activate()",
        )
        run(kc, "%%px\nx = 1")
        print(f"jupyter-distcomp live rank output, {RANKS} ranks on {os.cpu_count()} core(s)\n")

        ours, px = [], []
        for _ in range(3):  # alternated, so that load hits both alike
            ours += delays(kc, f"%%distcomp run bench\n{PRINT_STAMPS}")
            px += delays(kc, f"%%px --stream\n{PRINT_STAMPS}")
        ours_ms = statistics.median(ours) * 1000
        px_ms = statistics.median(px) * 1000
        print(
            f"print to notebook (median of {len(ours)}):  ours {ours_ms:6.2f} ms (max "
            f"{max(ours) * 1000:6.1f})   %%px --stream {px_ms:6.2f} ms (max {max(px) * 1000:6.1f})"
            f"   ratio {ours_ms / px_ms:.2f} (targets: <= 5 ms, <= 3x)"
        )

        print(bursts(km, kc))

        code = "for i in range(200_000):\n    print(i)"
        tic = time.perf_counter()
        got, in_order = count_lines(run(kc, f"%%distcomp run bench --ranks 0\n{code}"), 200_000)
        ours_s = time.perf_counter() - tic
        after = run(kc, "%%distcomp run bench\nprint('next')")
        said = "".join(text_of(m) for m in after if m["msg_type"] == "stream").splitlines()
        next_ok = sorted(said) == [f"[rank {r}] next" for r in range(RANKS)]
        print(
            f"200,000 lines on one rank:        ours {ours_s:6.2f} s ({got} of 200000 lines, "
            f"{'in order' if in_order else 'OUT OF ORDER'}); the next cell "
            f"{'got its own output' if next_ok else 'LOST OUTPUT'}"
        )

        ratio, ours_s, px_s = round_trips(kc)
        print(
            f"warm round trip in the kernel:     ours {ours_s * 1000:6.2f} ms   %%px "
            f"{px_s * 1000:6.2f} ms   ratio {ratio:.2f} (target: <= 1.0x)"
        )
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


if __name__ == "__main__":
    main()
