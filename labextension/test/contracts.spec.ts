import {
  COMM_ACTIONS,
  COMM_MESSAGE,
  COMM_MESSAGES,
  COMM_SCHEMA,
  COMM_TARGET,
  COMPONENT_TYPES,
  KERNEL_MESSAGE_DEFINITIONS,
  LAUNCHER_ALIASES,
  LAUNCHERS,
  named,
  RANK_ACTION,
  RANK_STATE,
  RANK_STATES,
  SUBCOMMANDS
} from '../src/contracts';
import { isSpecCell } from '../src/detection';
import { specDiagnostics } from '../src/diagnostics';

describe('contracts', () => {
  it('come from contracts.json, with every name the code acts on', () => {
    expect(COMM_TARGET).toBe('jupyter_distcomp');
    expect(COMM_ACTIONS).toEqual(
      expect.arrayContaining(Object.values(RANK_ACTION))
    );
    expect(COMM_MESSAGES).toEqual(
      expect.arrayContaining(Object.values(COMM_MESSAGE))
    );
    expect(RANK_STATES).toEqual(
      expect.arrayContaining(Object.values(RANK_STATE))
    );
    expect(() => named(COMM_ACTIONS, 'dance', 'comm action')).toThrow(
      /contracts\.json lists no comm action 'dance'/
    );
  });

  it("derive the comm's names from its schema, as contracts.py does", () => {
    expect(COMM_SCHEMA.$schema).toBe('http://json-schema.org/draft-07/schema#');
    expect(COMM_ACTIONS).toEqual([
      'interrupt',
      'restart',
      'stop',
      'refresh',
      'where'
    ]);
    expect(RANK_STATES).toEqual([
      'starting',
      'idle',
      'busy',
      'debugging',
      'dead'
    ]);
    expect(COMM_MESSAGES).toEqual(['snapshot', 'world', 'result']);
    expect(KERNEL_MESSAGE_DEFINITIONS).toEqual({
      snapshot: 'SnapshotMessage',
      world: 'WorldMessage',
      result: 'ResultMessage'
    });
  });

  it('name the subcommands the first line detection knows', () => {
    for (const word of SUBCOMMANDS) {
      expect(isSpecCell(`%%distcomp ${word}`)).toBe(false);
    }
    expect(isSpecCell('%%distcomp my_component')).toBe(true);
  });

  it('name the launchers and component types the diagnostics accept', () => {
    for (const launcher of [...LAUNCHERS, ...Object.keys(LAUNCHER_ALIASES)]) {
      const spec = `name: c\ntype: DistributedComponent\nlauncher:\n  type: ${launcher}\n  additional_arguments: python t.py\n`;
      expect(specDiagnostics(spec)).toEqual([]);
    }
    for (const type of COMPONENT_TYPES) {
      const found = specDiagnostics(`name: c\ntype: ${type}\n`);
      expect(
        found.filter(d => d.message.includes('unknown component type'))
      ).toEqual([]);
    }
  });
});
