/**
 * The rich view of a stopped rank's variable (the magnifier in the debugger's Variables).
 *
 * JupyterLab keeps one rich view per variable name and notebook; while it is open, the
 * command behind the magnifier (and behind "Render Variable") opens nothing. Every rank has
 * the same names, so after rank 2's `x` the magnifier of rank 1's `x` did nothing and the
 * open view went on showing rank 2's value. While the debugger's current frame
 * (`model.callstack.frame`) is a rank's (`rank N: ...`), a magnifier that opened nothing
 * closes the open view of its name and asks again: JupyterLab then opens it for the current
 * frame, and its title names the rank. Frames of the kernel's own threads (a plain cell)
 * keep JupyterLab's behaviour.
 *
 * It reads the debugger's model and the command registry's `commandExecuted` signal, knows
 * the views by the class JupyterLab renders them with, and disconnects all it connects when
 * disposed.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import type { IDebugger } from '@jupyterlab/debugger';
import type { CommandRegistry } from '@lumino/commands';
import type { IDisposable } from '@lumino/disposable';
import type { Widget } from '@lumino/widgets';

/** The rank of a Call Stack frame's name (`rank 2: <module>`), or null. */
export function rankOfFrame(name: string | null | undefined): number | null {
  const match = /^rank (\d+): /.exec((name ?? '').trim());
  return match ? Number(match[1]) : null;
}

/** The rich view's title: the variable, its rank, the notebook. */
export function richViewLabel(
  label: string,
  name: string,
  rank: number
): string {
  return `${name} (rank ${rank})${label.slice(name.length)}`;
}

/** What a view was opened for: the variable and its notebook's session path. */
interface IOpenedFor {
  name: string;
  path: string;
}

/** JupyterLab's side of the rich view: its command and the class of its views. */
export interface IRichViewKind {
  /** `Debugger.CommandIDs.renderMimeVariable` */
  command: string;
  /** Whether a main-area widget is a rich view (`instanceof Debugger.VariableRenderer`). */
  isView: (widget: Widget) => boolean;
}

/** Follows the magnifier's command and reopens its view for the current rank (see above). */
export class RankRichViews implements IDisposable {
  constructor(
    private readonly _commands: CommandRegistry,
    private readonly _shell: JupyterFrontEnd.IShell,
    private readonly _debugger: IDebugger,
    private readonly _kind: IRichViewKind
  ) {
    this._commands.commandExecuted.connect(this._onExecuted, this);
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._commands.commandExecuted.disconnect(this._onExecuted, this);
    for (const view of this._views.keys()) {
      view.disposed.disconnect(this._forget, this);
    }
    this._views.clear();
  }

  /** After JupyterLab ran the command: name the rank of a new view, or reopen the old one. */
  private _onExecuted(
    _: CommandRegistry,
    executed: CommandRegistry.ICommandExecutedArgs
  ): void {
    if (executed.id !== this._kind.command) {
      return;
    }
    const model = this._debugger.model;
    const name =
      (executed.args.name as string | undefined) ??
      model.variables.selectedVariable?.name;
    const path = this._debugger.session?.connection?.path;
    if (!name || !path) {
      return;
    }
    const rank = rankOfFrame(model.callstack.frame?.name);
    const opened = this._newViews();
    for (const view of opened) {
      this._remember(view, { name, path });
      if (rank !== null) {
        view.title.label = richViewLabel(view.title.label, name, rank);
      }
    }
    if (opened.length > 0 || rank === null || this._reopening) {
      return;
    }
    const stale = [...this._views].find(
      ([, of]) => of.name === name && of.path === path
    );
    if (!stale) {
      return;
    }
    stale[0].dispose(); // forgotten through its `disposed`
    this._reopening = true;
    try {
      // JupyterLab's command runs synchronously: its view is open when this returns
      void this._commands
        .execute(this._kind.command, executed.args)
        .catch(reason => console.error('The rich view did not reopen', reason));
    } finally {
      this._reopening = false;
    }
  }

  /** The rich views of the main area not seen before. */
  private _newViews(): Widget[] {
    const views: Widget[] = [];
    for (const widget of this._shell.widgets('main')) {
      if (this._kind.isView(widget) && !this._views.has(widget)) {
        views.push(widget);
      }
    }
    return views;
  }

  private _remember(view: Widget, of: IOpenedFor): void {
    this._views.set(view, of);
    view.disposed.connect(this._forget, this);
  }

  private _forget(view: Widget): void {
    view.disposed.disconnect(this._forget, this);
    this._views.delete(view);
  }

  private _isDisposed = false;
  private _reopening = false;
  private readonly _views = new Map<Widget, IOpenedFor>();
}
