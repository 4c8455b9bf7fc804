/**
 * The question a destructive rank action asks first, as JupyterLab asks before it restarts a
 * kernel: a restart always (the ranks' variables are lost), a stop while a rank is busy or
 * debugging, or a background cell runs (the running code is ended). Pure, for the unit tests.
 */
import { RANK_ACTION, RANK_STATE } from './contracts';
import type { IWorld, RankAction } from './messages';

export interface IConfirmation {
  title: string;
  body: string;
  /** The label of the button that goes ahead. */
  label: string;
}

/** What to ask before `action` on `world`; null when it can go ahead at once. */
export function confirmation(
  action: RankAction,
  world: IWorld
): IConfirmation | null {
  const size = world.ranks.length;
  const ranks = `${size} rank${size === 1 ? '' : 's'}`;
  const working = world.ranks.filter(
    r => r.state === RANK_STATE.busy || r.state === RANK_STATE.debugging
  ).length;
  let running = '';
  if (working) {
    running = ` ${working} of them ${working === 1 ? 'is' : 'are'} running code, which ends.`;
  } else if (world.background) {
    running = ' A background cell runs on them, which ends.';
  }
  if (action === RANK_ACTION.restart) {
    return {
      title: `Restart the ranks of ${world.name}?`,
      body:
        `The ${ranks} stop and a fresh world starts ${restartsAs(world)}: ` +
        `the variables the ranks hold are lost.${running}`,
      label: 'Restart'
    };
  }
  if (action === RANK_ACTION.stop && running) {
    return {
      title: `Stop the ranks of ${world.name}?`,
      body: `The ${ranks} stop and the variables they hold are lost.${running}`,
      label: 'Stop'
    };
  }
  return null;
}

/**
 * How a restart starts the world again: with the settings the next run would use, which
 * `pending` names while they differ from the running ranks' (core/summary.py pending_text).
 */
function restartsAs(world: IWorld): string {
  if (!world.pending) {
    return 'with the same layout';
  }
  const upcoming = /restarts as (.+)$/.exec(world.pending);
  return upcoming
    ? `with the new settings, as ${upcoming[1]}`
    : 'with the new settings (other hosts or connection)';
}
