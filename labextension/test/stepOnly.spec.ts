import {
  rankColumns,
  stepOnlyNote,
  stepOnlyRequest,
  stepOnlyToggle,
  STEP_ONLY
} from '../src/stepOnly';

describe("this rank only, for JupyterLab's debugger", () => {
  it('is a debug request the kernel answers on the control channel', () => {
    expect(stepOnlyRequest(2)).toEqual({
      type: 'request',
      seq: 0,
      command: STEP_ONLY,
      arguments: { rank: 2 }
    });
    expect(STEP_ONLY).toBe('distcompStepOnly');
    expect(stepOnlyRequest(null).arguments).toEqual({ rank: null });
  });

  it('the toggle of the chosen rank is pressed; pressing it again is for all ranks', () => {
    expect(stepOnlyToggle(1, 1)).toMatchObject({
      pressed: true,
      label: 'only' // as wide pressed as not: the filled toggle says it
    });
    expect(stepOnlyToggle(1, 1).title).toContain('every stopped rank again');
    expect(stepOnlyToggle(0, 1)).toMatchObject({
      pressed: false,
      label: 'only'
    });
    expect(stepOnlyToggle(0, null).title).toContain('rank 0 only');
  });

  it('says which rank steps alone, and nothing when all do', () => {
    expect(stepOnlyNote(3)).toBe(
      'Debugger steps go to rank 3 only (the other stopped ranks stay).'
    );
    expect(stepOnlyNote(null)).toBe('');
  });
});

describe("the ranks panel's columns", () => {
  it('while ranks are stopped, the toggle takes the place of what a row title says', () => {
    expect(rankColumns(false, 1)).toEqual([
      'rank',
      'node',
      'local',
      'state',
      'pid'
    ]);
    expect(rankColumns(true, 1)).toEqual(['rank', 'state', 'pid', 'step']);
    expect(rankColumns(true, 2)).toEqual([
      'rank',
      'node',
      'state',
      'pid',
      'step'
    ]);
  });
  it('a GPU column where a rank holds GPU memory, before the toggle', () => {
    expect(rankColumns(false, 1, true)).toEqual([
      'rank',
      'node',
      'local',
      'state',
      'pid',
      'gpu'
    ]);
    expect(rankColumns(true, 1, true)).toEqual([
      'rank',
      'state',
      'pid',
      'gpu',
      'step'
    ]);
  });
});
