import { LAUNCHERS } from '../src/contracts';
import {
  diagnosticCount,
  editorDiagnostics as editorDiagnosticsFor,
  messageParts,
  plainMessage
} from '../src/editorDiagnostics';
import { specDiagnostics } from '../src/diagnostics';
import { closest } from '../src/suggest';
import { TEMPLATES, templateSource } from '../src/templates';

const VALID = `name: mpi_demo
version: 0.0.1
type: DistributedComponent
inputs:
  n:
    type: Integer
    default: 2
  data:
    type: [AnyFile, AnyDirectory]
    optional: true
outputs:
  out:
    type: AnyDirectory
launcher:
  type: mpi
  additional_arguments: >-
    python train.py --n {inputs.n} [--data {inputs.data}] --out {outputs.out}
`;

function lineOf(text: string, needle: string): number {
  return text.split('\n').findIndex(line => line.includes(needle)) + 1;
}

describe('specDiagnostics', () => {
  it('finds nothing wrong in a valid spec, nor in an empty one', () => {
    expect(specDiagnostics(VALID)).toEqual([]);
    expect(specDiagnostics('')).toEqual([]);
  });

  it('marks a misspelt top-level key as a warning with a suggestion, on its line', () => {
    const text = VALID.replace('launcher:', 'lancher:');
    const found = specDiagnostics(text).filter(d => d.path === 'lancher');
    expect(found).toHaveLength(1);
    expect(found[0].severity).toBe('warning');
    expect(found[0].line).toBe(lineOf(text, 'lancher:'));
    expect(found[0].message).toContain("Did you mean 'launcher'?");
    expect(text.slice(found[0].from, found[0].to)).toBe('lancher');
  });

  it('says a DistributedComponent without a launcher needs one, at its type', () => {
    const text = VALID.replace('launcher:', 'lancher:');
    const found = specDiagnostics(text).find(d => d.severity === 'error');
    expect(found?.line).toBe(lineOf(text, 'type: DistributedComponent'));
    expect(found?.message).toContain(
      'a DistributedComponent needs a `launcher:`'
    );
  });

  it('marks a misspelt nested key as an error on that key', () => {
    const text = VALID.replace('    default: 2', '    defualt: 2');
    const [found] = specDiagnostics(text);
    expect(found.severity).toBe('error');
    expect(found.path).toBe('inputs.n.defualt');
    expect(found.line).toBe(lineOf(text, 'defualt'));
    expect(text.slice(found.from, found.to)).toBe('defualt');
    expect(found.message).toMatch(
      /unknown key 'defualt' in inputs\.n\. Did you mean 'default'\?/
    );
  });

  it('marks a wrong value type at the value', () => {
    const text = VALID.replace('    optional: true', '    optional: maybe');
    const [found] = specDiagnostics(text);
    expect(found.path).toBe('inputs.data.optional');
    expect(found.line).toBe(lineOf(text, 'optional: maybe'));
    expect(text.slice(found.from, found.to)).toBe('maybe');
    expect(found.message).toBe(
      "inputs.data.optional must be true or false, got a string 'maybe'."
    );
  });

  it('marks an unknown launcher type with the closest launcher', () => {
    const text = VALID.replace('  type: mpi', '  type: mpii');
    const [found] = specDiagnostics(text);
    expect(found.path).toBe('launcher.type');
    expect(found.line).toBe(lineOf(text, 'type: mpii'));
    expect(found.message).toContain(
      "unknown launcher type 'mpii'. Did you mean 'mpi'?"
    );
  });

  it('marks a placeholder that names no declared input, at the placeholder', () => {
    const text = VALID.replace('{inputs.n}', '{inputs.m}');
    const [found] = specDiagnostics(text);
    expect(found.path).toBe('launcher.additional_arguments');
    expect(text.slice(found.from, found.to)).toBe('{inputs.m}');
    expect(found.line).toBe(lineOf(text, '{inputs.m}'));
    expect(found.message).toContain(
      'placeholder {inputs.m} names no declared input.'
    );
  });

  it('says when a placeholder names a port of the other kind', () => {
    const text = VALID.replace('{outputs.out}', '{inputs.out}');
    const [found] = specDiagnostics(text);
    expect(found.message).toContain(
      "'out' is declared under outputs: write {outputs.out}."
    );
  });

  it('checks v2 ${{inputs.x}} placeholders in command', () => {
    const text =
      'name: c\ntype: command\ninputs:\n  lr:\n    type: number\ncommand: python t.py --lr ${{inputs.lr}} --x ${{inputs.x}}\n';
    const found = specDiagnostics(text);
    expect(found).toHaveLength(1);
    expect(text.slice(found[0].from, found[0].to)).toBe('${{inputs.x}}');
  });

  it('reports a missing required key and a YAML syntax error with positions', () => {
    const missing = specDiagnostics('type: DistributedComponent\n');
    expect(missing.map(d => d.message)).toContain(
      "missing required key 'name' in the spec. Fix: add `name: my_component`."
    );
    const broken = specDiagnostics('name: x\ninputs: [a\n');
    expect(broken[0].message).toMatch(/^YAML syntax/);
  });

  it('maps positions through the %%distcomp line for the editor', () => {
    const cell = '%%distcomp demo\n' + VALID.replace('version:', 'verison:');
    const [found] = editorDiagnosticsFor(cell);
    expect(cell.slice(found.from, found.to)).toBe('verison');
    expect(editorDiagnosticsFor('%%distcomp run demo\nlancher: 1')).toEqual([]);
  });

  it('gives the editor plain text, its code drawn as code in the tooltip', () => {
    const cell = '%%distcomp demo\nversion: 1\n';
    const messages = editorDiagnosticsFor(cell).map(d => d.message);
    expect(messages).toContain(
      "missing required key 'name' in the spec. Fix: add name: my_component."
    );
    expect(messages.join(' ')).not.toContain('`');
    expect(messageParts('Fix: add `name: my_component`, or `type:`.')).toEqual([
      { code: false, text: 'Fix: add ' },
      { code: true, text: 'name: my_component' },
      { code: false, text: ', or ' },
      { code: true, text: 'type:' },
      { code: false, text: '.' }
    ]);
    expect(plainMessage('a `b` c')).toBe('a b c');
  });
});

describe('closest', () => {
  it('suggests like Python difflib with cutoff 0.6', () => {
    expect(closest('lancher', ['launcher', 'inputs'])).toBe('launcher');
    expect(closest('INPUTS', ['inputs'])).toBe('inputs');
    expect(closest('zzz', ['launcher'])).toBeNull();
  });
});

describe('templates', () => {
  it('are spec cells without a single diagnostic, one per launcher', () => {
    const launchers = TEMPLATES.map(t => t.launcher);
    expect(launchers).toEqual(LAUNCHERS);
    for (const template of TEMPLATES) {
      expect(editorDiagnosticsFor(templateSource(template))).toEqual([]);
    }
  });
});

describe('the count under a spec cell', () => {
  it('counts errors and warnings, and says nothing without them', () => {
    expect(diagnosticCount([])).toBe('');
    expect(diagnosticCount(['error'])).toBe('1 error in this spec');
    expect(diagnosticCount(['error', 'warning', 'error'])).toBe(
      '2 errors, 1 warning in this spec'
    );
  });
});
