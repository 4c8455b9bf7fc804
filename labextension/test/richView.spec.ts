import type { JupyterFrontEnd } from '@jupyterlab/application';
import type { IDebugger } from '@jupyterlab/debugger';
import type { CommandRegistry } from '@lumino/commands';
import type { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import { Signal } from '@lumino/signaling';

import { RankRichViews, rankOfFrame, richViewLabel } from '../src/richView';

describe('the rich view of a rank variable', () => {
  it('reads the rank of a Call Stack frame, none of a kernel frame', () => {
    expect(rankOfFrame('rank 2: <module>')).toBe(2);
    expect(rankOfFrame(' rank 13: step ')).toBe(13);
    expect(rankOfFrame('<module>')).toBeNull();
    expect(rankOfFrame('frank 2: f')).toBeNull();
    expect(rankOfFrame(null)).toBeNull();
  });

  it('names the rank in its title', () => {
    expect(richViewLabel('x - a.ipynb', 'x', 1)).toBe('x (rank 1) - a.ipynb');
  });
});

/** A rich view as JupyterLab's command makes one: a title and `disposed`. */
class FakeView {
  constructor(public readonly frame: string) {}
  readonly title = { label: '' };
  readonly disposed = new Signal<this, void>(this);
  isDisposed = false;
  dispose(): void {
    this.isDisposed = true;
    this.disposed.emit();
    Signal.clearData(this);
  }
}

/** Lumino's CommandRegistry as it runs one command: `commandExecuted` after `execute`. */
class FakeCommands {
  constructor(
    private readonly run: (args: ReadonlyPartialJSONObject) => void
  ) {}
  readonly commandExecuted = new Signal<
    this,
    CommandRegistry.ICommandExecutedArgs
  >(this);
  execute(id: string, args: ReadonlyPartialJSONObject): Promise<void> {
    this.run(args);
    const result = Promise.resolve();
    this.commandExecuted.emit({ id, args, result });
    return result;
  }
}

/** JupyterLab's command, shell and debugger model, as far as the rich view reads them. */
function lab() {
  const main: FakeView[] = [];
  const debug = {
    session: { connection: { path: 'dir/a.ipynb' } },
    model: {
      callstack: { frame: null as { name: string } | null },
      variables: { selectedVariable: null }
    }
  };
  // one view per name and notebook, as JupyterLab's renderMimeVariable opens
  const commands = new FakeCommands(args => {
    const name = args.name as string;
    const frame = debug.model.callstack.frame?.name ?? '';
    if (main.some(v => v.title.label.startsWith(`${name} `))) {
      return;
    }
    const view = new FakeView(frame);
    view.title.label = `${name} - a.ipynb`;
    view.disposed.connect(() => main.splice(main.indexOf(view), 1));
    main.push(view);
  });
  const shell = {
    widgets: () => main[Symbol.iterator]()
  } as unknown as JupyterFrontEnd.IShell;
  const views = new RankRichViews(
    commands as unknown as CommandRegistry,
    shell,
    debug as unknown as IDebugger,
    {
      command: 'render',
      isView: widget => widget instanceof FakeView
    }
  );
  const magnify = async (frame: string | null, name: string) => {
    debug.model.callstack.frame = frame === null ? null : { name: frame };
    await commands.execute('render', { name });
  };
  return { main, views, magnify };
}

describe("the debugger's magnifier on a rank's frame", () => {
  it('reopens the view of a name for the selected rank, its title naming the rank', async () => {
    const { main, magnify } = lab();
    await magnify('rank 2: <module>', 'x');
    expect(main.map(v => [v.title.label, v.frame])).toEqual([
      ['x (rank 2) - a.ipynb', 'rank 2: <module>']
    ]);
    await magnify('rank 1: <module>', 'x');
    expect(main.map(v => [v.title.label, v.frame])).toEqual([
      ['x (rank 1) - a.ipynb', 'rank 1: <module>']
    ]);
    await magnify('rank 1: <module>', 'y');
    expect(main.map(v => v.title.label)).toEqual([
      'x (rank 1) - a.ipynb',
      'y (rank 1) - a.ipynb'
    ]);
  });

  it("keeps JupyterLab's behaviour on a kernel frame", async () => {
    const { main, magnify } = lab();
    await magnify('<module>', 'x');
    const first = main[0];
    await magnify('<module>', 'x');
    expect(main).toEqual([first]);
    expect(first.title.label).toBe('x - a.ipynb');
  });

  it('follows no command once disposed', async () => {
    const { main, views, magnify } = lab();
    await magnify('rank 2: <module>', 'x');
    views.dispose();
    expect(views.isDisposed).toBe(true);
    await magnify('rank 1: <module>', 'x');
    expect(main.map(v => v.title.label)).toEqual(['x (rank 2) - a.ipynb']);
  });
});
