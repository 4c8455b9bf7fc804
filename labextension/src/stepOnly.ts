/**
 * The ranks panel's "this rank only" mode for JupyterLab's debugger: Next, Step In, Step Out
 * and Continue go to one stopped rank instead of every stopped rank. It is a debug request
 * on the control channel (jupyter_distcomp/local/debug/dap.py), which the kernel answers
 * while the stopped cell still runs (a comm message would wait for the cell's end).
 */
import { KernelMessage } from '@jupyterlab/services';

/** The kernel's debug request that sets the mode (dap.py's STEP_ONLY). */
export const STEP_ONLY = 'distcompStepOnly';

/** The request's content: steps go to `rank` only, or (null) to every stopped rank. */
export function stepOnlyRequest(
  rank: number | null
): KernelMessage.IDebugRequestMsg['content'] {
  return {
    type: 'request',
    seq: 0,
    command: STEP_ONLY,
    arguments: { rank }
  };
}

/**
 * The toggle on a stopped rank's row: its label, whether it is on, its tooltip. The label is
 * the same either way (the pressed toggle is drawn filled), so its width never changes and
 * the row fits the sidebar's default width in both states.
 */
export function stepOnlyToggle(
  rank: number,
  only: number | null
): { label: string; pressed: boolean; title: string } {
  const pressed = only === rank;
  return {
    label: 'only',
    pressed,
    title: pressed
      ? `The debugger's steps go to rank ${rank} only: click for every stopped rank again`
      : `The debugger's Next, Step and Continue go to rank ${rank} only (this rank only)`
  };
}

/** The panel's line while the mode is on. */
export function stepOnlyNote(only: number | null): string {
  return only === null
    ? ''
    : `Debugger steps go to rank ${only} only (the other stopped ranks stay).`;
}

/** A column of the ranks panel's table. */
export type RankColumn =
  'rank' | 'node' | 'local' | 'state' | 'pid' | 'gpu' | 'step';

/**
 * The rank table's columns (`gpu`: where a rank holds GPU memory). While ranks are stopped
 * the "only" toggle needs a column: the local rank gives way (a row's tooltip says it), and
 * so does the node on one node (every rank's is 0), so that the toggle fits the sidebar's
 * default width.
 */
export function rankColumns(
  debugging: boolean,
  nodes: number,
  gpu = false
): RankColumn[] {
  const gpus: RankColumn[] = gpu ? ['gpu'] : [];
  if (!debugging) {
    return ['rank', 'node', 'local', 'state', 'pid', ...gpus];
  }
  return nodes > 1
    ? ['rank', 'node', 'state', 'pid', ...gpus, 'step']
    : ['rank', 'state', 'pid', ...gpus, 'step'];
}
