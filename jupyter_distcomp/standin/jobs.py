"""A submitted command job, run on local ranks as Azure ML runs it, with Azure's states and logs.

States: ``NotStarted`` (as the PUT answers), ``Queued``, ``Preparing`` (each held for its
delay), ``Running`` while the ranks run, ``Finalizing``, then ``Completed``, ``Failed`` (a
rank failed: the run's error names it, in Azure's words) or ``Canceled``. The ranks run
through :func:`jupyter_distcomp.local.command.run_command`, exactly as ``%distcomp command``
runs them (node-local disks, one address per node, Azure's variables). Each process's
stdout and stderr go to its own log, laid out as Azure lays them out in the artifact store:
``user_logs/std_log_process_N.txt`` (N: the global rank; ``user_logs/std_log.txt`` for a
job without distribution), and ``system_logs/lifecycler/execution-wrapper.log`` says what
the stand-in did. Each process's log exists (empty) from the job's start. Cancelling stops the ranks
as Azure ML does: SIGTERM, then SIGKILL after the grace period.

A line that a rank leaves without a newline for half a second is written with one (that is
how a local run reads it); Azure's own log keeps such a line open.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import TYPE_CHECKING

from ..errors import DistcompError
from .catalog import ACCOUNT, DATASTORES

if TYPE_CHECKING:
    from .server import AzureStandIn

#: seconds a job spends in each state around its run, unless the stand-in is told otherwise
DELAYS = {"NotStarted": 0.05, "Queued": 0.05, "Preparing": 0.05, "Finalizing": 0.05}
TERMINAL = ("Completed", "Failed", "Canceled")
SYSTEM_LOG = "system_logs/lifecycler/execution-wrapper.log"
#: the lines of a failed rank's output that the run's error quotes
ERROR_TAIL = 10


def log_prefix(name: str) -> str:
    """Where job ``name``'s logs live in the artifact store's container."""
    return f"/{ACCOUNT}/{DATASTORES['workspaceartifactstore']}/ExperimentRun/dcid.{name}"


class StandInJob:
    """One submitted command job and the thread that runs it."""

    def __init__(self, standin: AzureStandIn, name: str, props: dict) -> None:
        self.standin = standin
        self.name = name
        self.props = props
        self.status = "NotStarted"
        self.statuses = ["NotStarted"]  # every state it went through, in order
        self.error: dict | None = None
        self.logs: list[str] = []  # log names ("user_logs/std_log_process_0.txt"), as written
        self.output_uris: dict[str, str] = {}
        self.distributed = bool(props.get("distribution"))
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._main, name=f"standin-job-{name}", daemon=True)
        self.started_at: float | None = None
        self.ended_at: float | None = None

    # -- control --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL

    def cancel(self) -> None:
        """``jobs.begin_cancel``: stop the ranks; the job ends Canceled."""
        self._cancelled.set()
        from ..local.command.active import running_command

        run = running_command(self.run_name)
        if run is not None:
            run.interrupt(signal.SIGTERM)

    def cancel_and_wait(self, timeout: float = 30.0) -> None:
        if not self.ended:
            self.cancel()
        self._thread.join(timeout)

    def wait(self, timeout: float | None = None) -> str:
        """Block until the job ends; its final status."""
        self._thread.join(timeout)
        return self.status

    @property
    def run_name(self) -> str:
        """The name the run is registered under while its ranks run (``active.py``)."""
        return f"azureml-standin:{self.name}"

    # -- logs -----------------------------------------------------------------------------
    def log_name(self, rank: int) -> str:
        if not self.distributed:
            return "user_logs/std_log.txt"
        return f"user_logs/std_log_process_{rank}.txt"

    def write(self, log: str, text: str) -> None:
        with self._lock:
            if log not in self.logs:
                self.logs.append(log)
        self.standin.store.append(f"{log_prefix(self.name)}/{log}", text.encode())

    def log_text(self, log: str) -> str:
        """What log ``log`` (``user_logs/std_log_process_1.txt``) holds so far."""
        return (self.standin.store.read(f"{log_prefix(self.name)}/{log}") or b"").decode(
            errors="replace"
        )

    def _system(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        self.write(SYSTEM_LOG, f"{stamp} INFO execution-wrapper: {message}\n")

    def _on_line(self, rank: int, stream: str, text: str) -> None:
        self.write(self.log_name(rank), text + "\n")

    # -- the run --------------------------------------------------------------------------
    def _set(self, status: str) -> None:
        with self._lock:
            self.status = status
            self.statuses.append(status)
        self._system(f"job {self.name} is {status}")

    def _hold(self, status: str) -> bool:
        """Stay in ``status`` for its delay; True when cancelled meanwhile."""
        return self._cancelled.wait(self.standin.delays.get(status, 0.0))

    def _main(self) -> None:
        try:
            self._run()
        except Exception as exc:  # the stand-in's own fault: the job fails with it, said so
            self._end("Failed", "SystemError", f"the stand-in could not run the job: {exc!r}")

    def _run(self) -> None:
        if self._hold("NotStarted"):
            return self._end("Canceled")
        for status in ("Queued", "Preparing"):
            self._set(status)
            if self._hold(status):
                return self._end("Canceled")
        from .plan import make_plan

        try:
            plan = make_plan(self.standin, self.name, self.props)
        except DistcompError as exc:
            return self._end("Failed", "UserError", str(exc))
        self.output_uris = plan.output_uris
        self._set("Running")
        world = plan.component.world_size if self.distributed else 1
        for process in range(world):  # each process's log exists from its start, as on Azure ML
            self.write(self.log_name(process), "")
        self.started_at = time.time()
        from ..local.command import run_command
        from ..machine.hosts import Placement

        placement = Placement(self.standin.hosts, self.standin.ssh_command)
        keys = self._let_keys_in()
        try:
            result = run_command(
                plan.component,
                plan.inputs,
                plan.outputs,
                stream=None,
                cwd=plan.folder,
                check=False,
                name=self.run_name,
                on_line=self._on_line,
                placement=placement,
                debugger=False,  # Azure ML has no notebook waiting for a breakpoint()
            )
        except KeyboardInterrupt:
            return self._end("Canceled")
        except DistcompError as exc:
            return self._end("Failed", "UserError", str(exc))
        finally:
            self._shut_out(keys)
            self._clear_nodes()
        for rank in result.ranks:
            self._system(f"process rank {rank.rank} on node {rank.node}: {rank.status}")
        if self._cancelled.is_set():
            return self._end("Canceled")
        self._set("Finalizing")
        self._hold("Finalizing")
        if result.ok:
            return self._end("Completed")
        first = result.failed[0] if result.failed else result.ranks[0]
        tail = list(first.stderr_tail)[-ERROR_TAIL:] or list(first.stdout_tail)[-ERROR_TAIL:]
        self._end(
            "Failed",
            "UserError",
            f"Execution failed. User process 'Rank {first.rank}' exited with status code "
            f"{first.returncode}. Please check log file '{self.log_name(first.rank)}' for "
            "error details. Error: " + "\n".join(tail),
        )

    # -- the nodes' SSH service and disks ----------------------------------------------------
    def _ssh_keys(self) -> list[str]:
        """The public keys of the job's SSH service (``SshJobService.ssh_public_keys``)."""
        keys = []
        for service in (self.props.get("services") or {}).values():
            if service.get("jobServiceType") == "SSH":
                text = str((service.get("properties") or {}).get("sshPublicKeys") or "")
                keys += [line.strip() for line in text.splitlines() if line.strip()]
        return keys

    def _let_keys_in(self) -> list[str]:
        """While the job runs, its nodes' sshd let its SSH service's keys in."""
        path = self.standin.authorized_keys
        keys = self._ssh_keys() if path is not None and self.standin.hosts else []
        if keys and path is not None:
            with self.standin.keys_lock, open(path, "a", encoding="utf-8") as handle:
                handle.write("".join(f"{key}\n" for key in keys))
        return keys

    def _shut_out(self, keys: list[str]) -> None:
        path = self.standin.authorized_keys
        if not keys or path is None:
            return
        with self.standin.keys_lock:
            lines = path.read_text(encoding="utf-8").splitlines()
            for key in keys:
                if key in lines:
                    lines.remove(key)
            path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")

    def _clear_nodes(self) -> None:
        """The job's folder of ``%distcomp attach`` goes with its nodes' disks."""
        from ..azureml.debugged import FOLDER_PREFIX

        env = self.props.get("environmentVariables") or {}
        folder = str(env.get("DISTCOMP_ATTACH_DIR") or "")
        if folder.startswith(FOLDER_PREFIX) and "/" not in folder[len(FOLDER_PREFIX) :]:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)

    def _end(self, status: str, code: str = "", message: str = "") -> None:
        if code:
            self.error = {"code": code, "message": message}
        self.ended_at = time.time()
        self._set(status)


def run_details_error(job: StandInJob) -> dict | None:
    """The run's error as run history gives it (``ErrorResponse``), or None."""
    if job.error is None:
        return None
    return {"error": {"code": job.error["code"], "message": job.error["message"], "severity": 2}}


__all__ = ["DELAYS", "SYSTEM_LOG", "StandInJob", "log_prefix"]
