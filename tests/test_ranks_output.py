"""What ranks print, as a notebook receives it from a real kernel: bursts, displays, progress
lines, pieces of lines, tqdm, input().

The kernel's iopub is read without pause (as a notebook server does) until the cell's idle
status, which comes after all of the cell's output.
"""

from __future__ import annotations

import threading
import time

import pytest

from .ranks_support import MPI_SPEC
from .test_ranks_kernel import Kernel

pytestmark = pytest.mark.slow


class Output:
    """Every iopub message of one cell, in order."""

    def __init__(self, messages: list[dict], reply: dict):
        self.messages, self.reply = messages, reply

    @property
    def ok(self) -> bool:
        return self.reply.get("status") == "ok"

    def stream(self, name: str | None = None) -> str:
        return "".join(
            m["content"]["text"]
            for m in self.messages
            if m["msg_type"] == "stream" and name in (None, m["content"]["name"])
        )

    def of(self, *kinds: str) -> list[dict]:
        return [m for m in self.messages if m["msg_type"] in kinds]

    def shown(self) -> dict[str, str]:
        """display id -> the text/plain it shows last (displays updated in place)."""
        last: dict[str, str] = {}
        for m in self.of("display_data", "update_display_data"):
            display_id = m["content"].get("transient", {}).get("display_id")
            if display_id:
                last[display_id] = m["content"]["data"].get("text/plain", "")
        return last


def run(
    kernel: Kernel,
    code: str,
    timeout: float = 600,
    on_message=None,
    others=None,
    late=0.0,
    stdin=True,
) -> Output:
    """The cell's messages; ``others`` (a list) gets those of other cells meanwhile;
    ``late``: seconds the frontend starts reading late (a busy browser)."""
    msg_id = kernel.kc.execute(code, allow_stdin=stdin)
    time.sleep(late)
    messages: list[dict] = []
    deadline = time.monotonic() + timeout
    while True:
        msg = kernel.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            if others is not None:
                others.append(msg)
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
        messages.append(msg)
        if on_message is not None:
            on_message(msg)
    reply = kernel.kc.get_shell_msg(timeout=60)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kernel.kc.get_shell_msg(timeout=60)
    return Output(messages, reply["content"])


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    out = run(k, "%load_ext jupyter_distcomp\n%config DistComp.default_process_count_per_node = 2")
    assert out.ok, out.messages
    out = run(k, f"%%distcomp out\n{MPI_SPEC}")
    assert out.ok, out.messages
    out = run(k, "%%distcomp run out\nprint('up', mpi_rank)")
    assert out.ok and "[rank 1] up 1" in out.stream(), out.messages
    yield k
    k.close()


def test_a_burst_of_200000_lines_all_arrives_in_order_and_the_next_cell_gets_its_own(kernel):
    out = run(
        kernel, "%%distcomp run out --ranks 0\nfor i in range(200_000):\n    print(i)", late=3
    )
    assert out.ok, out.reply
    lines = out.stream("stdout").splitlines()
    assert lines == [f"[rank 0] {i}" for i in range(200_000)]
    assert "may be incomplete" not in out.stream("stderr")
    after = run(kernel, "%%distcomp run out\nprint('next', mpi_rank)")
    assert after.ok
    assert sorted(after.stream().splitlines()) == ["[rank 0] next 0", "[rank 1] next 1"]


#: the controller's memory (the guard's child; its schedulers have the same command line)
CONTROLLER_RSS = (
    "import psutil\n"
    "(controller,) = [p for p in psutil.Process().children(recursive=True)\n"
    "    if 'ipyparallel.controller' in ' '.join(p.cmdline())\n"
    "    and 'rank_side.guard' in ' '.join(p.parent().cmdline())]\n"
    "print(controller.memory_info().rss)"
)


RANK_RSS = "import psutil\nprint(psutil.Process().memory_info().rss)"


def test_neither_the_controller_nor_the_rank_keeps_a_copy_of_what_the_rank_prints(kernel):
    """40 MB printed on a rank pass through ipyparallel's controller, which keeps none of
    it, and the rank keeps none of it either (IPython's output history): neither grows with
    the rank's output."""
    controller = int(run(kernel, CONTROLLER_RSS).stream().split()[-1])
    rank = int(run(kernel, f"%%distcomp run out --ranks 0\n{RANK_RSS}").stream().split()[-1])
    code = "line = 'x' * 192\nfor i in range(200_000):\n    print(f'{i:07d}{line}')"
    out = run(kernel, f"%%distcomp run out --ranks 0\n{code}")
    assert out.ok and len(out.stream("stdout")) > 40_000_000, out.reply
    grown = int(run(kernel, CONTROLLER_RSS).stream().split()[-1]) - controller
    assert grown < 10_000_000, f"the controller grew by {grown:,} bytes"
    out = run(kernel, f"%%distcomp run out --ranks 0\n{RANK_RSS}")
    grown = int(out.stream().split()[-1]) - rank
    assert grown < 10_000_000, f"the rank grew by {grown:,} bytes"


def test_20000_displays_on_a_rank_all_arrive_to_a_frontend_that_reads_late(kernel):
    out = run(
        kernel,
        "%%distcomp run out --ranks 1\nfrom IPython.display import display\n"
        "for i in range(20_000):\n    display(i)",
        late=8,
    )
    assert out.ok, out.reply
    shown = [m["content"]["data"]["text/plain"] for m in out.of("display_data")]
    assert shown == [str(i) for i in range(20_000)]
    assert all(m["content"]["metadata"]["distcomp_rank"] == 1 for m in out.of("display_data"))


MB = 1024 * 1024
#: what the kernel may grow by while a notebook reads a burst late (the burst is 60 MB)
KERNEL_GROWTH = 30 * MB


class PeakMemory:
    """The kernel process's largest resident size while in the block, sampled every 10 ms."""

    def __init__(self, kernel: Kernel):
        import psutil

        self.process = psutil.Process(kernel.km.provisioner.pid)
        self.before = self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> PeakMemory:
        self.before = self.peak = self.process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    @property
    def growth(self) -> int:
        return self.peak - self.before


def test_a_burst_read_late_waits_on_the_rank_and_the_kernel_stays_small(kernel):
    """60 MB printed on a rank while the notebook reads nothing for 10 s: the rank waits
    for the notebook (no line is lost), the kernel holds a small part of it at any time, and
    the next cell gets its own output at once."""
    pad = "x" * 300
    with PeakMemory(kernel) as memory:
        out = run(
            kernel,
            f"%%distcomp run out --ranks 0\nfor i in range(200_000):\n    print(i, {pad!r})",
            late=10,
        )
    assert out.ok, out.reply
    lines = out.stream("stdout").splitlines()
    assert len(lines) == 200_000
    assert lines == [f"[rank 0] {i} {pad}" for i in range(200_000)]
    assert "may be incomplete" not in out.stream("stderr")
    assert memory.growth < KERNEL_GROWTH, (
        f"the kernel grew by {memory.growth / MB:.0f} MB while the notebook read late"
    )
    tic = time.monotonic()
    after = run(kernel, "%%distcomp run out\nprint('next', mpi_rank)")
    assert after.ok
    assert sorted(after.stream().splitlines()) == ["[rank 0] next 0", "[rank 1] next 1"]
    assert time.monotonic() - tic < 15, "the next cell waited for the burst's backlog"


def test_20000_large_displays_read_late_all_arrive_and_the_kernel_stays_small(kernel):
    """20,000 displays of 3,000 characters (60 MB) while the notebook reads nothing for 10 s:
    every one arrives, in order, and the kernel holds a small part of them at any time."""
    with PeakMemory(kernel) as memory:
        out = run(
            kernel,
            "%%distcomp run out --ranks 1\nfrom IPython.display import display\n"
            "for i in range(20_000):\n    display(f'{i:05d}' + 'y' * 3000)",
            late=10,
        )
    assert out.ok, out.reply
    shown = [m["content"]["data"]["text/plain"] for m in out.of("display_data")]
    assert len(shown) == 20_000
    assert shown == [repr(f"{i:05d}" + "y" * 3000) for i in range(20_000)]
    assert memory.growth < KERNEL_GROWTH, (
        f"the kernel grew by {memory.growth / MB:.0f} MB while the notebook read late"
    )


def test_output_that_cannot_arrive_before_the_cell_ends_is_counted_in_that_cell(kernel):
    """A rank's 1,000 lines are held up on the rank (its iopub thread is busy for 5 s) while
    it answers: the cell ends without them and says exactly how many lines it did not show;
    the next cell gets its own output only."""
    out = run(
        kernel,
        "%%distcomp run out --ranks 0\nimport sys, time\nfor i in range(1000):\n    print(i)\n"
        "def hold():\n    time.sleep(5)\n"
        "    sys.stdout.flush_timeout = sys.stderr.flush_timeout = 10\n"
        "sys.stdout.flush_timeout = sys.stderr.flush_timeout = 0.5  # the rank answers at once\n"
        "sys.stdout.pub_thread.schedule(hold)",
    )
    assert out.ok, out.reply
    said = out.stream("stderr")
    assert "[rank 0] 1,000 line(s) of output are not shown" in said, said
    assert "Fix:" in said
    shown = [ln for ln in out.stream("stdout").splitlines() if ln.startswith("[rank 0]")]
    assert len(shown) == 0, "the lines were held up on the rank"
    time.sleep(5)  # the held lines arrive: they belong to the cell that ended
    after = run(kernel, "%%distcomp run out\nprint('next', mpi_rank)")
    assert after.ok
    assert sorted(after.stream().splitlines()) == ["[rank 0] next 0", "[rank 1] next 1"]


def test_a_paced_write_on_a_rank_returns_what_was_written(kernel):
    out = run(
        kernel, "%%distcomp run out --ranks 0\nimport sys\nn = sys.stdout.write('abc\\n')\nprint(n)"
    )
    assert out.ok, out.reply
    assert out.stream("stdout").splitlines() == ["[rank 0] abc", "[rank 0] 4"]


def test_each_line_arrives_while_the_rank_still_runs_in_rank_order(kernel):
    arrived: list[tuple[float, str]] = []

    def seen(msg):
        if msg["msg_type"] == "stream":
            arrived.append((time.monotonic(), msg["content"]["text"]))

    out = run(
        kernel,
        "%%distcomp run out\nimport time\nfor i in range(3):\n"
        "    print('tick', i, flush=True)\n    time.sleep(1)",
        on_message=seen,
    )
    assert out.ok
    text = out.stream()
    for rank in (0, 1):
        mine = [ln for ln in text.splitlines() if ln.startswith(f"[rank {rank}]")]
        assert mine == [f"[rank {rank}] tick {i}" for i in range(3)]
    first = next(when for when, piece in arrived if "tick 0" in piece)
    last = next(when for when, piece in arrived if "tick 2" in piece)
    assert last - first > 1.5, "the first line waited for the cell's end"


def rank_displays(out: Output) -> dict[int, list[str]]:
    """rank -> the last text of each display shown in place for it, in order."""
    ids: dict[int, list[str]] = {}
    for m in out.of("display_data"):
        display_id = m["content"].get("transient", {}).get("display_id")
        if display_id:
            ids.setdefault(m["content"]["metadata"]["distcomp_rank"], []).append(display_id)
    shown = out.shown()
    return {rank: [shown[i] for i in displays] for rank, displays in ids.items()}


def test_a_line_redrawn_with_cr_updates_in_place_and_keeps_its_last_state(kernel):
    updates: list[str] = []
    out = run(
        kernel,
        "%%distcomp run out\nimport time\nfor i in range(5):\n"
        "    print(f'\\rstep {i}/5', end='', flush=True)\n    time.sleep(0.3)",
        on_message=lambda m: (
            m["msg_type"] == "update_display_data"
            and updates.append(m["content"]["data"]["text/plain"])
        ),
    )
    assert out.ok
    assert rank_displays(out) == {0: ["[rank 0] step 4/5"], 1: ["[rank 1] step 4/5"]}
    for rank in (0, 1):  # each step showed while the cell ran, in place
        assert [f"[rank {rank}] step {i}/5" for i in range(1, 5)] == sorted(
            set(u for u in updates if u.startswith(f"[rank {rank}]"))
        )
    assert out.stream() == "", "the progress line also came out as stream text"


def test_a_line_written_in_pieces_is_one_labelled_line(kernel):
    out = run(
        kernel,
        "%%distcomp run out\nimport sys, time\n"
        "sys.stdout.write('epoch 1 '); sys.stdout.flush(); time.sleep(0.1)\n"
        "sys.stdout.write('loss=0.5'); sys.stdout.flush(); time.sleep(0.1)\n"
        "sys.stdout.write(' done\\n'); sys.stdout.flush()\n"
        "print('next')",
    )
    assert out.ok
    for rank in (0, 1):
        mine = [ln for ln in out.stream().splitlines() if ln.startswith(f"[rank {rank}]")]
        assert mine == [f"[rank {rank}] epoch 1 loss=0.5 done", f"[rank {rank}] next"]


def test_a_line_waiting_for_its_end_shows_and_is_completed_in_place(kernel):
    out = run(
        kernel,
        "%%distcomp run out --ranks 0\nimport time\nprint('loading...', end='', flush=True)\n"
        "time.sleep(1.5)\nprint(' done')\nprint('after')",
    )
    assert out.ok
    first = out.of("display_data")[0]["content"]["data"]["text/plain"]
    assert first == "[rank 0] loading...", "the unfinished line did not show while it waited"
    assert rank_displays(out) == {0: ["[rank 0] loading... done"]}
    assert out.stream() == "[rank 0] after\n"


def test_a_line_without_newline_at_the_end_of_the_cell_is_kept(kernel):
    out = run(kernel, "%%distcomp run out --ranks 1\nprint('no end', end='')")
    assert out.ok
    assert out.stream() == "[rank 1] no end\n"


@pytest.mark.parametrize("module", ["tqdm", "tqdm.auto", "tqdm.notebook"])
def test_tqdm_shows_one_bar_per_rank_that_reaches_its_end(kernel, module):
    out = run(
        kernel,
        f"%%distcomp run out\nfrom {module} import tqdm\nimport time\n"
        "for i in tqdm(range(5)):\n    time.sleep(0.1)",
    )
    assert out.ok, out.reply
    widgets = [
        m
        for m in out.of("display_data")
        if "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
    ]
    if module == "tqdm":
        bars = rank_displays(out)
        assert sorted(bars) == [0, 1]
        for rank, shown in bars.items():
            assert len(shown) == 1 and shown[0].startswith(f"[rank {rank}] 100%|"), shown
            assert "5/5" in shown[0]
        assert out.stream().strip() == "", "an empty or garbled labelled line"
    else:  # a notebook's bar: an ipywidget per rank, its label line above it
        assert len(widgets) == 2
        assert sorted(m["content"]["metadata"]["distcomp_rank"] for m in widgets) == [0, 1]
        assert sorted(out.stream().splitlines()) == ["[rank 0]", "[rank 1]"]
        ends = [
            m
            for m in out.of("comm_msg")
            if m["content"]["data"].get("state", {}).get("bar_style") == "success"
        ]
        assert len(ends) == 2, "a bar did not reach its end"


ENV_SPEC = """\
name: envs
type: DistributedComponent
environment_variables:
  DISTCOMP_TRY: {value}
  TORCH_DISTRIBUTED_DEBUG: DETAIL
launcher:
  type: {launcher}
  additional_arguments: python train.py
"""


@pytest.mark.parametrize("launcher", ["mpi", "torch.distributed", "tensorflow", "deepspeed"])
def test_the_specs_environment_variables_are_on_every_rank_and_in_the_views(kernel, launcher):
    name = "env_" + launcher.replace(".", "_")
    spec = ENV_SPEC.replace("envs", name).replace("{launcher}", launcher)
    assert run(kernel, f"%%distcomp {name}\n{spec.replace('{value}', 'one')}").ok
    out = run(
        kernel,
        f"%%distcomp run {name}\nimport os\n"
        "print(os.environ['DISTCOMP_TRY'], os.environ['TORCH_DISTRIBUTED_DEBUG'])",
    )
    assert out.ok, out.reply
    lines = out.stream().splitlines()
    assert lines and all(line.endswith("] one DETAIL") for line in lines), lines
    shown = run(kernel, f"%distcomp env {name}")
    text = "".join(str(m["content"].get("data", {})) for m in shown.of("display_data"))
    assert "DISTCOMP_TRY" in text and "DETAIL" in text
    panel = run(
        kernel,
        "from jupyter_distcomp.notebook.views.preview import preview_html\n"
        f"print(preview_html({name}, None))",
    )
    assert "DISTCOMP_TRY" in panel.stream() and "one" in panel.stream()

    # a redefinition with another value restarts the ranks, saying so
    again = run(kernel, f"%%distcomp {name}\n{spec.replace('{value}', 'two')}")
    assert again.ok
    out = run(kernel, f"%%distcomp run {name}\nimport os\nprint(os.environ['DISTCOMP_TRY'])")
    # a notice, not an error: on stdout (the restart notice is not styled as one)
    said = again.stream() + out.stream()
    assert f"The environment variables of {name} changed (DISTCOMP_TRY): restarting" in said
    assert sorted(out.stream("stdout").splitlines()) == sorted(
        line.replace("one DETAIL", "two") for line in lines
    )
    run(kernel, f"%distcomp stop {name}")


START_SPEC = """\
name: starts
type: DistributedComponent
environment_variables:
  PYTHONPATH: {path}
  DISTCOMP_AT_START: "yes"
launcher:
  type: {launcher}
  additional_arguments: python train.py
"""


@pytest.mark.parametrize("launcher", ["mpi", "torch.distributed"])
def test_the_specs_environment_variables_hold_from_each_ranks_start(kernel, launcher, tmp_path):
    """As on Azure ML, a rank's process starts with the spec's variables: what Python reads
    only at its start (PYTHONPATH) takes effect, and they are in the process's first
    environment, not only set later."""
    (tmp_path / "distcomp_start_probe.py").write_text("FOUND = 'probe'\n")
    name = "starts_" + launcher.replace(".", "_")
    spec = START_SPEC.replace("starts", name).format(path=tmp_path, launcher=launcher)
    assert run(kernel, f"%%distcomp {name}\n{spec}").ok
    code = (
        "import distcomp_start_probe\n"
        "with open('/proc/self/environ', 'rb') as f:\n"
        "    first = dict(v.split(b'=', 1) for v in f.read().split(b'\\0') if b'=' in v)\n"
        "print(distcomp_start_probe.FOUND, first.get(b'DISTCOMP_AT_START'))"
    )
    out = run(kernel, f"%%distcomp run {name}\n{code}")
    assert out.ok, out.reply
    assert sorted(out.stream("stdout").splitlines()) == [
        f"[rank {r}] probe b'yes'" for r in range(2)
    ]
    run(kernel, f"%distcomp stop {name}")


class Answering:
    """Answers the kernel's input requests as a notebook user would: ``answer(prompt)``."""

    def __init__(self, kernel: Kernel, answer):
        import threading

        self.kernel, self.answer = kernel, answer
        self.prompts: list[tuple[str, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import queue

        while not self._stop.is_set():
            try:
                msg = self.kernel.kc.get_stdin_msg(timeout=0.1)
            except queue.Empty:
                continue
            if msg["msg_type"] == "input_request":
                prompt, password = msg["content"]["prompt"], msg["content"]["password"]
                self.prompts.append((prompt, password))
                self.kernel.kc.input(self.answer(prompt))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def test_input_and_getpass_on_a_rank_prompt_in_the_notebook_naming_the_rank(kernel):
    code = (
        "%%distcomp run out\nimport getpass\nprint('before', flush=True)\n"
        "name = input('name? ')\nsecret = getpass.getpass('token: ')\n"
        "print('hello', name, len(secret))"
    )
    with Answering(kernel, lambda prompt: f"ann{prompt[6]}" if "name" in prompt else "xyz") as user:
        out = run(kernel, code)
    assert out.ok, out.reply
    assert sorted(user.prompts) == [
        ("[rank 0] name? ", False),
        ("[rank 0] token: ", True),
        ("[rank 1] name? ", False),
        ("[rank 1] token: ", True),
    ]
    lines = out.stream().splitlines()
    assert "[rank 0] hello ann0 3" in lines and "[rank 1] hello ann1 3" in lines


def test_input_on_a_rank_where_the_frontend_cannot_answer_is_an_eof_error(kernel):
    out = run(kernel, "%%distcomp run out --ranks 0\nvalue = input('value? ')", stdin=False)
    assert not out.ok
    text = out.stream() + "\n".join(out.reply.get("traceback", []))
    assert "rank 0 called input(), but this frontend does not answer input()" in text
    assert "EOFError" in text and "this frontend does not answer input()" in text
    again = run(kernel, "%%distcomp run out\nprint('still here', mpi_rank)")
    assert sorted(again.stream().splitlines()) == ["[rank 0] still here 0", "[rank 1] still here 1"]


def test_input_in_a_background_cell_is_asked_at_wait(kernel):
    with Answering(kernel, lambda prompt: "later") as user:
        started = run(
            kernel,
            "%%distcomp run out --ranks 1 --background\nprint('got', input('value? '))",
        )
        assert started.ok
        assert user.prompts == [], "a background cell's thread prompted"
        later: list[dict] = []  # what the background cell says while other cells run
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = run(kernel, "%distcomp status out", others=later).stream()
            if "waits for input()" in status:
                break
            time.sleep(0.2)
        assert "rank 1 waits for input(): `%distcomp wait out` asks you" in status, status
        assert "breakpoint" not in status, status
        waited = run(kernel, "%distcomp wait out", others=later)
    assert waited.ok, waited.reply
    assert user.prompts == [("[rank 1] value? ", False)]
    said = started.stream() + waited.stream() + Output(later, {}).stream()
    assert "[rank 1] waits for input (value?)" in said
    assert "[rank 1] got later" in said


def test_a_progress_line_of_a_background_cell_updates_in_its_own_cell(kernel):
    started = run(
        kernel,
        "%%distcomp run out --background\nimport time\nfor i in range(4):\n"
        "    print(f'\\rstep {i}/4', end='', flush=True)\n    time.sleep(0.3)",
    )
    assert started.ok
    later: list[dict] = []
    waited = run(kernel, "%distcomp wait out", others=later)
    assert waited.ok, waited.reply
    mine = [
        m
        for m in later
        if m["parent_header"]["msg_id"] == started.messages[0]["parent_header"]["msg_id"]
    ]
    shown = Output(started.messages + mine, {})
    assert rank_displays(shown) == {0: ["[rank 0] step 3/4"], 1: ["[rank 1] step 3/4"]}
    assert not Output(waited.messages, {}).of("display_data", "update_display_data")
