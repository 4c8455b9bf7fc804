/**
 * The bad specs of tests/data/bad_specs.json, which tests/test_bad_specs.py loads with the
 * kernel's load_component: the editor must mark an error on the line the kernel reports,
 * and say every error the kernel says, in the same words (`messages`; none listed for YAML
 * syntax, which each side's parser words).
 */
import badSpecs from '../../tests/data/bad_specs.json';
import { specDiagnostics } from '../src/diagnostics';

interface IBadSpec {
  name: string;
  spec: string;
  line: number;
  key: string;
  messages: string[];
}

const CASES = (badSpecs as IBadSpec[]).map(c => [c.name, c] as const);

describe('the bad specs the kernel rejects', () => {
  it('are a list of a dozen or so', () => {
    expect(CASES.length).toBeGreaterThanOrEqual(10);
  });

  it.each(CASES)('%s: the same messages', (_, { spec, messages }) => {
    if (messages.length) {
      const errors = specDiagnostics(spec).filter(d => d.severity === 'error');
      expect(errors.map(d => d.message)).toEqual(messages);
    }
  });

  it.each(CASES)('%s: an error on the same line', (_, { spec, line, key }) => {
    const errors = specDiagnostics(spec).filter(d => d.severity === 'error');
    const onLine = errors.filter(d => d.line === line);
    expect(onLine.map(d => `${d.line}: ${d.message}`)).not.toEqual([]);
    // the editor names the key where the schema does; YAML errors concern the whole spec
    expect(
      onLine.some(
        d => d.path === '' || d.path === key || d.path.startsWith(`${key}.`)
      )
    ).toBe(true);
  });
});
