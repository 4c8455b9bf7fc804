/**
 * The ranks of each kernel, as told by the kernel over the `jupyter_distcomp` comm
 * (see jupyter_distcomp/notebook/comm.py for why a comm and why the kernel opens it).
 * Messages each way are typed and checked by ./messages, from contracts.json's comm schema.
 */
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import {
  COMM_MESSAGE,
  COMM_TARGET,
  RANK_ACTION,
  RANK_STATE
} from './contracts';
import {
  IRankRequest,
  IWorld,
  KernelMessage as FromKernel,
  parseKernelMessage,
  RankAction
} from './messages';
import { markStalePanels } from './stalePanels';
import { stepOnlyRequest } from './stepOnly';

/** The last "where" the kernel answered: each rank's stack, as text. */
export interface IWhere {
  name: string;
  text: string;
}

/** What one kernel told us: its worlds, and the last result of a panel action. */
export class KernelRanks {
  readonly worlds = new Map<string, IWorld>();
  message = '';
  where: IWhere | null = null;
  /** The rank the debugger's steps go to alone ("this rank only"), or null for all. */
  stepOnly: number | null = null;
  private comm: Kernel.IComm | null = null;
  private _changed = new Signal<this, void>(this);

  constructor(readonly kernel: Kernel.IKernelConnection) {}

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** True once the kernel has loaded jupyter_distcomp (its comm is open). */
  get connected(): boolean {
    return this.comm !== null && !this.comm.isDisposed;
  }

  get rankCount(): number {
    let count = 0;
    this.worlds.forEach(world => (count += world.ranks.length));
    return count;
  }

  adopt(
    comm: Kernel.IComm,
    first?: KernelMessage.ICommOpenMsg | KernelMessage.ICommMsgMsg
  ): void {
    this.comm = comm;
    comm.onMsg = msg => this.receive(msg.content.data);
    comm.onClose = () => {
      if (this.comm === comm) {
        this.comm = null;
        this.worlds.clear();
        this._changed.emit();
      }
    };
    if (first) {
      this.receive(first.content.data);
    }
    this._changed.emit();
  }

  /** "This rank only" for JupyterLab's debugger: its steps go to `rank` (null: to all). */
  async setStepOnly(rank: number | null): Promise<void> {
    const reply = await this.kernel.requestDebug(stepOnlyRequest(rank)).done;
    const content = reply.content as {
      success?: boolean;
      body?: { rank?: number | null };
    };
    if (content.success) {
      this.stepOnly = content.body?.rank ?? null;
    } else {
      this.message =
        'This kernel cannot step one rank only (its debugger is off?).';
    }
    this._changed.emit();
  }

  /** The kernel went idle: an interrupt we asked for is done. */
  kernelIdle(): void {
    if (this.message.startsWith('Interrupting')) {
      this.message = 'Interrupted.';
      this._changed.emit();
    }
  }

  /** The kernel restarted or died: what we knew is gone. */
  reset(): void {
    this.comm = null;
    this.worlds.clear();
    this.message = '';
    this.where = null;
    this.stepOnly = null;
    this._changed.emit();
  }

  /**
   * Ask the kernel to act on a component's ranks. Interrupting a busy kernel goes through a
   * kernel interrupt: comm messages wait on the shell channel until the running cell ends,
   * and the magics turn a kernel interrupt into SIGINT on every rank.
   */
  request(action: RankAction, name: string): void {
    if (action === RANK_ACTION.interrupt && this.kernel.status === 'busy') {
      this.message = `Interrupting the kernel (and with it the ranks of ${name})...`;
      void this.kernel.interrupt();
    } else if (this.connected) {
      this.message =
        this.kernel.status === 'busy'
          ? `${action} ${name}: queued until the running cell ends.`
          : `${action} ${name}...`;
      const request: IRankRequest = { action, name };
      this.comm!.send({ ...request }); // a copy: send takes a JSONObject, an interface is none
    }
    this._changed.emit();
  }

  /** A message from the kernel; one this version does not know is logged and ignored. */
  private receive(data: unknown): void {
    const { message, reason } = parseKernelMessage(data);
    if (message) {
      this.apply(message);
    } else {
      console.warn(
        `jupyter-distcomp: ignored a message from the kernel's ranks comm: ${reason}`,
        data
      );
    }
    this._changed.emit();
  }

  private apply(message: FromKernel): void {
    switch (message.type) {
      case COMM_MESSAGE.snapshot:
        this.worlds.clear();
        message.worlds.forEach(world => this.worlds.set(world.name, world));
        break;
      case COMM_MESSAGE.world: {
        const world = message.world;
        if (
          this.message &&
          !this.message.startsWith('Interrupting') &&
          movedOn(this.worlds.get(world.name), world)
        ) {
          this.message = ''; // the ranks moved on: the last action's result is history
        }
        if (world.stopped) {
          this.worlds.delete(world.name);
        } else {
          this.worlds.set(world.name, world);
        }
        break;
      }
      case COMM_MESSAGE.result:
        if (message.action === RANK_ACTION.where && message.ok) {
          this.where = { name: message.name ?? '', text: message.message };
          this.message = '';
        } else {
          this.message = `${message.ok ? '' : 'Failed: '}${message.message}`;
        }
        break;
    }
  }
}

/**
 * A new world, or a rank that was idle and is not any more: what the panel said of the
 * last action no longer holds. Late events of a cell that ended (busy -> idle) do not count.
 */
function movedOn(before: IWorld | undefined, after: IWorld): boolean {
  if (after.stopped) {
    return false;
  }
  if (!before) {
    return true;
  }
  const was = new Map(before.ranks.map(r => [r.rank, r.state]));
  return after.ranks.some(
    r => r.state !== RANK_STATE.idle && was.get(r.rank) === RANK_STATE.idle
  );
}

/** Connects to the distcomp comm of every notebook kernel; follows the active notebook. */
export class RanksService {
  private byKernel = new WeakMap<Kernel.IKernelConnection, KernelRanks>();
  private _activeChanged = new Signal<this, void>(this);
  private _active: KernelRanks | null = null;

  constructor(private tracker: INotebookTracker) {
    tracker.widgetAdded.connect((_, panel) => this.watch(panel));
    tracker.forEach(panel => this.watch(panel));
    tracker.currentChanged.connect(() => this.follow());
    this.follow();
  }

  /** Emitted when the active notebook changes or its kernel's ranks change. */
  get activeChanged(): ISignal<this, void> {
    return this._activeChanged;
  }

  get active(): KernelRanks | null {
    return this._active;
  }

  private watch(panel: NotebookPanel): void {
    const context = panel.sessionContext;
    const attach = () => {
      const kernel = context.session?.kernel;
      if (kernel) {
        this.ranksOf(kernel);
      }
      if (this.tracker.currentWidget === panel) {
        this.follow();
      }
    };
    context.kernelChanged.connect((_, change) => {
      if (change.oldValue) {
        markStalePanels(panel.node); // another kernel: the panels' widgets are gone
      }
      attach();
    });
    context.statusChanged.connect((_, status) => {
      if (
        status === 'restarting' ||
        status === 'autorestarting' ||
        status === 'dead'
      ) {
        markStalePanels(panel.node);
      }
    });
    void context.ready.then(attach);
    attach();
  }

  private ranksOf(kernel: Kernel.IKernelConnection): KernelRanks {
    const known = this.byKernel.get(kernel);
    if (known) {
      return known;
    }
    const created = new KernelRanks(kernel);
    this.byKernel.set(kernel, created);
    kernel.registerCommTarget(COMM_TARGET, (comm, msg) =>
      created.adopt(comm, msg)
    );
    kernel.statusChanged.connect((_, status) => {
      if (
        status === 'restarting' ||
        status === 'autorestarting' ||
        status === 'dead'
      ) {
        created.reset();
      } else if (status === 'idle') {
        created.kernelIdle();
      }
    });
    void this.reconnect(created);
    return created;
  }

  /**
   * After a page reload the kernel still has the comm it opened for the previous page: when
   * comm_info lists one, the kernel has loaded distcomp and we open our own comm to it.
   */
  private async reconnect(ranks: KernelRanks): Promise<void> {
    try {
      const reply = await ranks.kernel.requestCommInfo({
        target_name: COMM_TARGET
      });
      const content = reply.content as {
        status: string;
        comms?: Record<string, unknown>;
      };
      if (
        content.status === 'ok' &&
        Object.keys(content.comms ?? {}).length &&
        !ranks.connected
      ) {
        const comm = ranks.kernel.createComm(COMM_TARGET);
        ranks.adopt(comm);
        void comm.open({});
      }
    } catch {
      // a kernel without comm_info or one that went away: the next comm_open will do
    }
  }

  private follow(): void {
    const kernel =
      this.tracker.currentWidget?.sessionContext.session?.kernel ?? null;
    const next = kernel ? this.ranksOf(kernel) : null;
    if (next !== this._active) {
      this._active?.changed.disconnect(this.emit, this);
      this._active = next;
      next?.changed.connect(this.emit, this);
    }
    this.emit();
  }

  private emit(): void {
    this._activeChanged.emit();
  }
}
