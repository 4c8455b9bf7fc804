"""``diagnose``: the verdict on a job from every rank's log, and the details under it.

How it decides (each rule that applied is listed under the diagnosis):

- a rank's own failure is its last traceback unless that error only follows another
  rank's (classify.py); an exit a launcher reports for a rank with no traceback (a
  non-zero exit code, MPI_Abort, SIGKILL) is its own failure too;
- the first to fail is ordered by the ranks' state lines' failure times, else by what
  Open MPI names (the first process to exit non-zero, the rank that called MPI_Abort, a
  rank killed by a signal), else by torchrun's failure times; without any, the lowest rank
  is named first and the diagnosis says the order is not known;
- with no failure of a rank's own, the ranks hung: the state lines' verdicts (the ledger,
  the wait-for graph, the known patterns) name the collective and the place; from logs
  alone, the ranks without a time-out while the others timed out in one collective (NCCL's
  watchdog, gloo) are the ones they waited for, and so are the ranks Horovod's stall
  inspector lists as missing;
- with no error anywhere, the job's status (when the caller knows it) tells a completed
  job from one stopped while its ranks stalled.
"""

from __future__ import annotations

from ...rank_side.ledger_words import format_ranks
from ..secrets import mask_secrets
from . import launchers, stall
from .classify import CONSEQUENCE, CPU_OOM, GPU_OOM, NONE, OWN, PEER_GONE, STOPPED, kind_of
from .flight import flight_lines
from .model import COMPLETED, FAILED, HUNG, NO_ERROR, NO_LOGS, Diagnosis, Layout, RankLog, Section
from .reading import JobRead, RankRead, read_job
from .watchdog import gloo_verdict, horovod_verdict, nccl_verdict
from .words import consequence_sections, failure_sections, launcher_sections, quiet_sections

OWN_RULE = (
    "a rank's own failure: its last traceback, unless the error only follows another's "
    "(a lost peer, a collective's time-out, a launcher's signal), or a launcher's report "
    "of its non-zero exit, MPI_Abort or kill"
)


def _layout(job: JobRead, world: int, given: int | None) -> Layout:
    if given:
        return Layout(world, given, "given", guessed=False)
    locals_ = {r: s.get_int("local_rank") for r, s in job.states.items()}
    nodes = {r: s.get_int("node") for r, s in job.states.items()}
    if locals_ and all(v is not None for v in locals_.values()):
        count = max(v for v in locals_.values() if v is not None) + 1
        if all(nodes[r] in (None, r // count) for r in nodes):
            return Layout(world, count, "from the ranks' state lines", guessed=False)
    guess = launchers.per_node([e for e in job.exits if e.source == "torchrun"])
    if guess:
        return Layout(world, guess, "from torchrun's report of ranks and local ranks", False)
    return Layout(world)


def _launcher_failures(job: JobRead) -> None:
    """Ranks with no traceback whose exit a launcher reports: their own failure, or (a
    launcher's SIGTERM) the end the launcher gave them."""
    oom = bool(launchers.OOM_WORDS.search(job.launcher_text))
    for exit_ in job.exits:
        read = job.ranks.get(exit_.rank)
        if read is None or read.end.side != NONE:
            continue
        end = read.end
        if exit_.code is not None and exit_.code < 0 and exit_.signal in ("SIGTERM", "Terminated"):
            end.side, end.kind = CONSEQUENCE, STOPPED
            end.evidence = f"stopped by {exit_.source} ({exit_.signal}) with no error of its own"
        elif exit_.code == -9 or exit_.signal in ("Killed", "SIGKILL"):
            end.side = OWN
            end.kind = (
                CPU_OOM
                if oom or launchers.killed_by_shell("\n".join(read.lines[-20:]))
                else "error"
            )
            end.evidence = f"killed by SIGKILL ({exit_.source}): " + (
                "the kernel's out-of-memory killer"
                if oom
                else "out of memory, or killed from outside"
            )
        elif exit_.signal == "MPI_ABORT":
            end.side, end.kind, end.evidence = OWN, "error", "called MPI_Abort"
        elif exit_.code:
            end.side, end.kind = OWN, "error"
            end.evidence = f"exited with code {exit_.code} ({exit_.source})"
    for rank, state in job.states.items():
        read = job.ranks.get(rank)
        if read is not None and read.end.side == NONE and state.reason == "failure" and state.error:
            read.end.side, read.end.kind = kind_of(state.error)
            read.end.evidence = state.error


def _order(job: JobRead, own: list[int]) -> tuple[list[int], str]:
    """The ranks with their own failure, first first, and the evidence of the order."""
    states = job.states
    timed = {r: states[r].time for r in own if r in states and states[r].reason == "failure"}
    if timed:
        first = sorted(timed, key=lambda r: (timed[r], r))
        return first + [r for r in own if r not in timed], (
            "by the failure times in the ranks' state lines"
        )
    mpi = [e.rank for e in job.exits if e.source == "mpirun" and e.root_cause and e.rank in own]
    if mpi:
        first = list(dict.fromkeys(mpi))
        return first + [r for r in own if r not in first], "by what Open MPI names first"
    torchrun = {e.rank: (e.time, not e.root_cause) for e in job.exits if e.source == "torchrun"}
    if any(r in torchrun for r in own):
        ordered = sorted(own, key=lambda r: (torchrun.get(r, ("~", True)), r))
        return ordered, "by torchrun's failure times"
    return sorted(own), "not known (the logs carry no times): the lowest rank is named first"


def diagnose(
    logs: list[RankLog],
    per_node: int | None = None,
    status: str | None = None,
    launcher_logs: dict[str, str] | None = None,
    dumps: dict[int, dict] | None = None,
    notes: list[str] | None = None,
) -> Diagnosis:
    """The diagnosis of a job from its ranks' logs (``per_node``: processes per node, when
    the caller knows; ``status``: the job's status, "Completed", "Failed" or "Canceled", when
    known; ``launcher_logs``: logs no rank wrote, by name; ``dumps``: Flight Recorder dumps
    by rank, read by flight.read_dump)."""
    if not logs:
        return Diagnosis("No rank logs to read.", NO_LOGS, Layout(0))
    job = read_job(logs, launcher_logs)
    _launcher_failures(job)
    size = job.size
    world = list(range(size))
    layout = _layout(job, size, per_node)
    ends = {r: read.end for r, read in job.ranks.items()}
    own = [r for r, e in ends.items() if e.side == OWN]
    hang, stuck = stall.hang_lines(job.states, size)
    diagnosis = Diagnosis("", NO_ERROR, layout, notes=[*(notes or []), *job.notes])
    if own:
        ordered, how = _order(job, own)
        _failed(diagnosis, job, ordered, how)
    else:
        _hung(diagnosis, job, world, hang, stuck, status)
    if hang and own:
        diagnosis.sections.append(Section("what the ranks' state lines say", hang))
    elif len(hang) > 1:
        diagnosis.sections.append(Section("what the ranks' state lines say", hang[1:]))
    for heading, lines in stall.stack_sections(job.states):
        diagnosis.sections.append(Section(heading, lines))
    if dumps:
        diagnosis.sections.append(Section("Flight Recorder dumps", flight_lines(dumps, size)))
        diagnosis.rules.append("Flight Recorder: each rank's dump, read as plain data")
    diagnosis.sections += launcher_sections(job, ends)
    diagnosis.sections += quiet_sections(job)
    diagnosis.sections.append(Section("layout", [layout.text()]))
    if layout.guessed:
        diagnosis.notes.append(
            "the nodes are not known: ranks are named without their node "
            "(pass the processes per node to name them)"
        )
    if job.skipped:
        diagnosis.notes.append(
            f"{format_ranks(job.skipped)}: large logs, read at their start and end (and every "
            "state line in them)"
        )
    return _masked(diagnosis)


def _masked(diagnosis: Diagnosis) -> Diagnosis:
    """The diagnosis with every credential the logs printed masked (core/secrets.py)."""
    diagnosis.verdict = mask_secrets(diagnosis.verdict)
    for section in diagnosis.sections:
        section.heading = mask_secrets(section.heading)
        section.lines = [mask_secrets(line) for line in section.lines]
    diagnosis.notes = [mask_secrets(note) for note in diagnosis.notes]
    return diagnosis


def _failed(diagnosis: Diagnosis, job: JobRead, ordered: list[int], how: str) -> None:
    ends = {r: read.end for r, read in job.ranks.items()}
    first = ordered[0]
    same = [
        r
        for r in ordered
        if (ends[r].error, ends[r].place) == (ends[first].error, ends[first].place)
    ]
    consequences = sorted(r for r, e in ends.items() if e.side == CONSEQUENCE)
    quiet = sorted(r for r, e in ends.items() if e.side == NONE)
    diagnosis.outcome = FAILED
    diagnosis.culprits = same
    diagnosis.ended = consequences
    verdict = _failure_words(diagnosis.layout, job.ranks[first], same, len(ordered) > len(same))
    if consequences:
        verdict += f"; {format_ranks(consequences)} {_say(consequences, 'was', 'were')} ended by it"
    if quiet:
        verdict += (
            f"; {format_ranks(quiet)} {_say(quiet, 'shows', 'show')} no error of "
            f"{_say(quiet, 'its', 'their')} own"
        )
    diagnosis.verdict = verdict
    diagnosis.sections += failure_sections(diagnosis.layout, job, ordered)
    diagnosis.sections += consequence_sections(job, consequences, format_ranks(same))
    diagnosis.rules.append(OWN_RULE)
    if len(ordered) > len(same):  # failures of different kinds: which came first matters
        diagnosis.rules.append(f"the order of the failures: {how}")


def _say(ranks: list[int], one: str, more: str) -> str:
    """``one`` for one rank, ``more`` for several."""
    return one if len(ranks) == 1 else more


def _failure_words(layout: Layout, read: RankRead, same: list[int], others: bool) -> str:
    end = read.end
    who = format_ranks(same)
    node = layout.node(read.rank)
    where = f" on node {node}" if node is not None and (layout.nodes or 1) > 1 else ""
    if end.kind == GPU_OOM:
        if end.gpu:
            gpu, want, total, free = end.gpu
            return (
                f"{who} ran out of GPU memory{where}, GPU {gpu}: tried to allocate {want} "
                f"with {free} free of {total}"
            )
        return f"{who} ran out of GPU memory{where}: {end.error}"
    if end.kind == CPU_OOM:
        return f"{who} ran out of CPU memory{where}: {end.error[:200]}"
    first = "failed first" if others else "failed"
    place = f" at {end.place}" if end.place else ""
    return f"{who} {first}{where}: {end.error[:200]}{place}"


def _hung(
    diagnosis: Diagnosis,
    job: JobRead,
    world: list[int],
    hang: list[str],
    stuck: list[int],
    status: str | None,
) -> None:
    ends = {r: read.end for r, read in job.ranks.items()}
    watch = {r: read.watchdog for r, read in job.ranks.items() if read.watchdog}
    gloo = {r: read.gloo for r, read in job.ranks.items() if read.gloo}
    stalled = horovod_verdict({r: read.lines for r, read in job.ranks.items()})
    consequences = sorted(r for r, e in ends.items() if e.side == CONSEQUENCE)
    diagnosis.ended = consequences
    log_words, named = "", list[int]()
    if watch:
        log_words, named = nccl_verdict(watch, world, ends)
        diagnosis.rules.append(
            "NCCL watchdog: the ranks with no time-out line, or another sequence number or "
            "operation, are the ones the others waited for"
        )
    elif gloo:
        log_words, named = gloo_verdict(gloo, world)
        diagnosis.rules.append(
            "gloo time-outs: the ranks that did not time out are the ones the others waited for"
        )
    elif stalled[0]:
        log_words, named = stalled
        diagnosis.rules.append(
            "Horovod's stall inspector: the ranks it lists as missing are the ones the others "
            "waited for"
        )
    elif consequences:
        lost = [r for r in consequences if ends[r].kind == PEER_GONE]
        named = sorted(r for r, e in ends.items() if e.side == NONE)
        if lost:
            end = ends[lost[0]]
            call = end.traceback.library_function() if end.traceback else ""
            log_words = (
                f"{format_ranks(lost)} lost a peer"
                + (f" in {call}" if call else "")
                + (f" at {end.place}" if end.place else "")
                + f" ({end.words}): a rank they needed had gone"
            )
        else:
            log_words = (
                f"{format_ranks(consequences)} {_say(consequences, 'was', 'were')} stopped with "
                f"no error of {_say(consequences, 'its', 'their')} own"
            )
        if named:
            log_words += (
                f"; {format_ranks(named)} {_say(named, 'shows', 'show')} no error: "
                + _say(named, "it exited first, or was", "they exited first, or were")
                + " ended without a word"
            )
    if hang:
        diagnosis.outcome = HUNG
        diagnosis.verdict = "The ranks hung: " + hang[0]
        diagnosis.culprits = stuck
        if log_words:
            diagnosis.sections.append(Section("what the logs alone say", [log_words]))
        diagnosis.rules.append(
            "state lines: the collectives ledger's verdicts, the wait-for graph of the ranks' "
            "pending calls and the known hang patterns, as of the newest state line"
        )
    elif log_words:
        diagnosis.outcome = HUNG
        diagnosis.verdict = log_words
        diagnosis.culprits = named
    else:
        _no_error(diagnosis, job, status)
    if consequences:
        diagnosis.sections += consequence_sections(job, consequences, "")


def _no_error(diagnosis: Diagnosis, job: JobRead, status: str | None) -> None:
    ranks = format_ranks(sorted(job.ranks))
    exited = [r for r, s in job.states.items() if s.reason == "exit"]
    if (status or "").lower() == "completed" or (exited and len(exited) == len(job.ranks)):
        diagnosis.outcome = COMPLETED
        diagnosis.verdict = f"All ranks completed: no error in the logs of {ranks}."
    elif status:
        diagnosis.outcome = HUNG
        diagnosis.verdict = (
            f"The job {status.lower()} with no error in any rank's log: {ranks} stalled or "
            "were stopped from outside, and the logs alone cannot say where. Fix: run it with "
            "distcomp's rank side (state lines name the call and the line each rank waits in)."
        )
    else:
        diagnosis.verdict = (
            f"No error in any rank's log ({ranks}). If the job completed, every rank ended "
            "well; if it was canceled or timed out, the ranks stalled where the logs alone "
            "cannot show."
        )
