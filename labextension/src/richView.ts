/**
 * The rich view of a stopped rank's variable (the magnifier in the debugger's Variables).
 *
 * JupyterLab keeps one rich view per variable name and notebook (the widget id
 * `jp-debugger-variable-mime-NAME-PATH`); while it is open, the magnifier of that name opens
 * nothing. Every rank has the same names, so after rank 2's `x` the magnifier of rank 1's
 * `x` did nothing and the open view went on showing rank 2's value. While the Call Stack's
 * selected frame is a rank's (`rank N: ...`), a magnifier first closes the open view of its
 * name: JupyterLab then opens it for the selected frame, and its title names the rank.
 * Frames of the kernel's own threads (a plain cell) keep JupyterLab's behaviour.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import type { INotebookTracker } from '@jupyterlab/notebook';

const RICH_VIEW = 'jp-DebuggerRichVariable';

/** The rank of a Call Stack frame's name (`rank 2: <module>`), or null. */
export function rankOfFrame(name: string | null | undefined): number | null {
  const match = /^rank (\d+): /.exec((name ?? '').trim());
  return match ? Number(match[1]) : null;
}

/** JupyterLab's id of the rich view of `name` in the notebook of session `path`. */
export function richViewId(name: string, path: string): string {
  return `jp-debugger-variable-mime-${name}-${path.replace('/', '-')}`;
}

/** The rich view's title: the variable, its rank, the notebook. */
export function richViewLabel(
  label: string,
  name: string,
  rank: number
): string {
  return `${name} (rank ${rank})${label.slice(name.length)}`;
}

/** The variable whose magnifier an event asks for: its name, or null (another event). */
function magnifierName(event: Event): string | null {
  const target = event.target as Element | null;
  if (!target?.closest?.('.jp-DebuggerVariables')) {
    return null;
  }
  const asked =
    event.type === 'click'
      ? target.closest('.jp-DebuggerVariables-renderVariable')
      : (event as KeyboardEvent).key === 'Enter'
        ? target
        : null;
  const row = asked?.closest('.jp-TreeItem');
  const name = row?.querySelector('.jp-DebuggerVariables-name')?.textContent;
  return name ? name.trim() : null;
}

/** Make a magnifier open the view of the selected rank's variable (see above). */
export function followSelectedRank(
  app: JupyterFrontEnd,
  tracker: INotebookTracker
): void {
  const before = (event: Event) => {
    const name = magnifierName(event);
    const selected = document.querySelector(
      '.jp-DebuggerCallstackFrame.selected .jp-DebuggerCallstackFrame-name'
    );
    const rank = rankOfFrame(selected?.textContent);
    const path = tracker.currentWidget?.sessionContext.session?.path;
    if (name === null || rank === null || !path) {
      return;
    }
    const id = richViewId(name, path);
    for (const widget of app.shell.widgets('main')) {
      if (widget.id === id && widget.hasClass(RICH_VIEW)) {
        widget.dispose(); // JupyterLab's handler, next, opens it anew
      }
    }
    setTimeout(() => {
      for (const widget of app.shell.widgets('main')) {
        if (widget.id === id && widget.hasClass(RICH_VIEW)) {
          widget.title.label = richViewLabel(widget.title.label, name, rank);
        }
      }
    });
  };
  // the capture phase: before JupyterLab's own handlers (React's, on the page's root)
  document.addEventListener('click', before, true);
  document.addEventListener('keydown', before, true);
}
