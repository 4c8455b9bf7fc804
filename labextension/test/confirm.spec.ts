import { confirmation } from '../src/confirm';
import type { IWorld, RankState } from '../src/messages';

function world(
  states: RankState[],
  background = false,
  pending: string | null = null
): IWorld {
  return {
    name: 'demo',
    instance_count: 1,
    process_count_per_node: states.length,
    stopped: false,
    pending,
    background,
    hang: null,
    ranks: states.map((state, rank) => ({
      rank,
      node: 0,
      local_rank: rank,
      state,
      pid: 100 + rank
    }))
  };
}

describe('a destructive rank action asks first', () => {
  it('a restart always asks: the variables of the ranks are lost', () => {
    const asked = confirmation('restart', world(['idle', 'idle']));
    expect(asked?.title).toBe('Restart the ranks of demo?');
    expect(asked?.body).toContain('the variables the ranks hold are lost');
    expect(asked?.label).toBe('Restart');
    expect(asked?.body).toContain('a fresh world starts with the same layout');
  });

  it('a restart with changed settings says it starts with them, not the same layout', () => {
    const pending = 'running 1 node x 2; next run restarts as 2 nodes x 2';
    const asked = confirmation(
      'restart',
      world(['idle', 'idle'], false, pending)
    );
    expect(asked?.body).toContain(
      'a fresh world starts with the new settings, as 2 nodes x 2:'
    );
    expect(asked?.body).not.toContain('same layout');
    const hosts =
      'running 1 node x 2; next run restarts them (other hosts or connection)';
    expect(
      confirmation('restart', world(['idle'], false, hosts))?.body
    ).toContain('with the new settings (other hosts or connection)');
  });

  it('a stop of idle ranks goes ahead; of busy or debugging ones it asks', () => {
    expect(confirmation('stop', world(['idle', 'idle']))).toBeNull();
    const asked = confirmation('stop', world(['busy', 'debugging', 'idle']));
    expect(asked?.body).toContain('2 of them are running code, which ends.');
    expect(confirmation('stop', world(['idle'], true))?.label).toBe('Stop');
  });

  it('interrupt and refresh never ask', () => {
    expect(confirmation('interrupt', world(['busy']))).toBeNull();
    expect(confirmation('refresh', world(['busy']))).toBeNull();
  });
});
