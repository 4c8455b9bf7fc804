/**
 * Spec text -> diagnostics with positions, for the editor.
 *
 * The checks are the kernel's (jupyter_distcomp/core/spec_parsing/): the shared JSON Schema
 * run by ajv, unknown top-level keys as warnings, and `{inputs.x}` / `${{inputs.x}}`
 * placeholders that name no declared port. Messages follow the kernel's wording (what,
 * where, the fix) so a user sees the same sentence while typing and when the cell runs.
 * Positions come from the `yaml` parser's node ranges, so a mark sits on the offending key
 * or value, not on the whole cell.
 */
import Ajv, { ErrorObject, ValidateFunction } from 'ajv';
import {
  Document,
  isMap,
  isPair,
  isScalar,
  isSeq,
  LineCounter,
  Node,
  parseDocument
} from 'yaml';

import { COMPONENT_TYPES, LAUNCHER_ALIASES, LAUNCHERS } from './contracts';
import { inputRules } from './inputRules';
import { COMPONENT_SCHEMA, JSONSchema } from './schema';
import { didYouMean } from './suggest';

export type Severity = 'error' | 'warning';

export interface ISpecDiagnostic {
  /** Offsets into the YAML text (the cell body), end exclusive. */
  from: number;
  to: number;
  /** 1-based line and column of `from` in the YAML text. */
  line: number;
  column: number;
  severity: Severity;
  message: string;
  /** Dotted path of the key concerned, e.g. "launcher.type"; "" for the whole spec. */
  path: string;
}

type Segment = string | number;
type Range = [number, number];

const PLACEHOLDER = /(?<!\{)\{(inputs|outputs)\.([^{}\s]*)\}(?!\})/g;
const V2_PLACEHOLDER = /\$\{\{\s*(inputs|outputs)\.([A-Za-z0-9_]+)\s*\}\}/g;
const TEMPLATE_KEYS: Segment[][] = [
  ['command'],
  ['launcher', 'additional_arguments']
];

const validators = new WeakMap<JSONSchema, ValidateFunction>();

function validatorFor(schema: JSONSchema): ValidateFunction {
  let validate = validators.get(schema);
  if (!validate) {
    const ajv = new Ajv({ allErrors: true, strict: false, verbose: true });
    validate = ajv.compile(schema);
    validators.set(schema, validate);
  }
  return validate;
}

/** Every problem in a spec's YAML text; an empty list for a valid (or still empty) spec. */
export function specDiagnostics(
  text: string,
  schema: JSONSchema = COMPONENT_SCHEMA
): ISpecDiagnostic[] {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false });
  const found = new Collector(text, doc, lines);
  if (doc.errors.length) {
    for (const error of doc.errors) {
      found.add(
        [error.pos[0], error.pos[1]],
        'error',
        `YAML syntax: ${firstSentence(error.message)}`,
        ''
      );
    }
    return found.sorted();
  }
  const data: unknown = doc.toJS();
  if (data === null || data === undefined) {
    return [];
  }
  if (!isPlainObject(data)) {
    found.add(
      found.valueRange([]),
      'error',
      `a spec must be a YAML mapping of keys (name:, type:, ...), not a ${kindName(data)}.`,
      ''
    );
    return found.sorted();
  }
  unknownTopLevelKeys(data, schema, found);
  schemaErrors(data, schema, found);
  placeholders(data, found);
  componentRules(data, found);
  inputRules(data, {
    error: (path, at, message) =>
      found.add(
        at === 'key' ? found.keyRange(path) : found.valueRange(path),
        'error',
        message,
        path.join('.')
      )
  });
  return found.sorted();
}

/** What the schema cannot say about a component's kind (the kernel's spec_parsing/loader.py `_kind`). */
function componentRules(data: Record<string, unknown>, found: Collector): void {
  const type =
    typeof data.type === 'string' ? data.type.split('@')[0].toLowerCase() : '';
  if (
    type === 'command' &&
    (data.command === undefined || data.command === null)
  ) {
    found.add(
      found.valueRange(['type']),
      'error',
      'a v2 command component needs `command:`. Fix: add `command: python train.py ...`.',
      'type'
    );
  }
  if (type === 'commandcomponent' && !('command' in data)) {
    found.add(
      found.valueRange(['type']),
      'error',
      'a CommandComponent needs a `command:` (the command template). ' +
        'Fix: add `command: python script.py --arg {inputs.x}`.',
      'type'
    );
  } else if (type === 'commandcomponent' && 'launcher' in data) {
    found.add(
      found.keyRange(['launcher']),
      'error',
      'a CommandComponent runs one process and takes no launcher. ' +
        'Fix: use `type: DistributedComponent`, or remove the launcher.',
      'launcher'
    );
  }
  if (type === 'distributedcomponent' && !('launcher' in data)) {
    const hint =
      'command' in data
        ? ' (move `command:` into launcher.additional_arguments)'
        : '';
    found.add(
      found.valueRange(['type']),
      'error',
      `a DistributedComponent needs a \`launcher:\` with \`type\` (${orList(LAUNCHERS)}) ` +
        `and \`additional_arguments\` (the command)${hint}.`,
      'type'
    );
  }
}

function unknownTopLevelKeys(
  data: Record<string, unknown>,
  schema: JSONSchema,
  found: Collector
): void {
  const known = Object.keys(
    (schema.properties as Record<string, unknown>) ?? {}
  );
  for (const key of Object.keys(data)) {
    if (!known.includes(key)) {
      found.add(
        found.keyRange([key]),
        'warning',
        `unknown top-level key '${key}', ignored.${didYouMean(key, known)}`,
        key
      );
    }
  }
}

function schemaErrors(
  data: Record<string, unknown>,
  schema: JSONSchema,
  found: Collector
): void {
  const validate = validatorFor(schema);
  if (validate(data)) {
    return;
  }
  const errors = validate.errors ?? [];
  for (let error of errors) {
    if (/\/(anyOf|oneOf)\/\d+\//.test(error.schemaPath)) {
      continue; // a branch of an alternative: the anyOf/oneOf error says it, below
    }
    if (error.keyword === 'anyOf' || error.keyword === 'oneOf') {
      // the value has the right kind when a branch fails deeper inside it: say that
      const deeper = errors.filter(
        e =>
          e.schemaPath.startsWith(`${error.schemaPath}/`) &&
          e.instancePath.length > error.instancePath.length
      );
      if (deeper.length) {
        error = deeper.reduce((a, b) =>
          b.instancePath.length > a.instancePath.length ? b : a
        );
      }
    }
    const path = pointerToPath(error.instancePath);
    describe(error, path, found);
  }
}

function describe(error: ErrorObject, path: Segment[], found: Collector): void {
  const where = path.join('.') || 'the spec';
  const last = path[path.length - 1];
  switch (error.keyword) {
    case 'additionalProperties': {
      const key = String(error.params.additionalProperty);
      const allowed = Object.keys(
        (error.parentSchema?.properties as Record<string, unknown>) ?? {}
      );
      found.add(
        found.keyRange([...path, key]),
        'error',
        `unknown key '${key}' in ${where}.${didYouMean(key, allowed)} Allowed keys: ${allowed.join(', ')}.`,
        [...path, key].join('.')
      );
      return;
    }
    case 'required': {
      const key = String(error.params.missingProperty);
      const example =
        (
          { name: 'my_component', type: 'DistributedComponent' } as Record<
            string,
            string
          >
        )[key] ?? '...';
      found.add(
        found.keyRange(path),
        'error',
        `missing required key '${key}' in ${where}. Fix: add \`${key}: ${example}\`.`,
        path.join('.')
      );
      return;
    }
    case 'enum': {
      const value = String(error.data);
      if (path.length === 2 && path[0] === 'launcher' && last === 'type') {
        found.add(
          found.valueRange(path),
          'error',
          `unknown launcher type '${value}'.${didYouMean(value, LAUNCHERS)} Allowed: ${LAUNCHERS.join(', ')}.`,
          where
        );
        return;
      }
      let options = [
        ...new Set(
          (error.schema as unknown[]).map(o => String(o).toLowerCase())
        )
      ];
      // name launchers, not their aliases, when the canonical name is allowed too
      options = options.filter(
        o => !(o in LAUNCHER_ALIASES && options.includes(LAUNCHER_ALIASES[o]))
      );
      found.add(
        found.valueRange(path),
        'error',
        `'${value}' is not allowed for ${where}.${didYouMean(value, options)} Allowed: ${options.join(', ')}.`,
        where
      );
      return;
    }
    case 'type':
    case 'anyOf':
    case 'oneOf': {
      const expected =
        error.keyword === 'type'
          ? typeNames(error.schema)
          : alternatives(error.schema as JSONSchema[]);
      found.add(
        found.valueRange(path),
        'error',
        `${where} must be ${expected}, got ${got(error.data)}.`,
        where
      );
      return;
    }
    case 'pattern': {
      if (path.length === 1 && last === 'type') {
        const value = String(error.data).split('@')[0];
        found.add(
          found.valueRange(path),
          'error',
          `unknown component type '${String(error.data)}'.${didYouMean(value, COMPONENT_TYPES)} Use DistributedComponent (with a launcher), CommandComponent (with a command), or v2 'command' (with an optional distribution).`,
          where
        );
        return;
      }
      if (path.length === 1 && last === 'name') {
        const fixed =
          String(error.data).replace(/[^A-Za-z0-9_.-]+/g, '_') || 'component';
        found.add(
          found.valueRange(path),
          'error',
          `name ${short(String(error.data))} may only contain letters, digits and '-', '_', '.'. Fix: name: ${fixed}`,
          where
        );
        return;
      }
      const hint =
        (error.parentSchema?.description as string | undefined) ??
        `match ${String(error.schema)}`;
      found.add(
        found.valueRange(path),
        'error',
        `${where} ${short(String(error.data))} is not valid: ${hint}.`,
        where
      );
      return;
    }
    case 'minimum': {
      found.add(
        found.valueRange(path),
        'error',
        `${where} must be at least ${String(error.schema)}, got ${got(error.data)}.`,
        where
      );
      return;
    }
    case 'minLength':
    case 'minItems': {
      found.add(
        found.valueRange(path),
        'error',
        `${where} must not be empty.`,
        where
      );
      return;
    }
    default:
      found.add(
        found.valueRange(path),
        'error',
        `${where} ${error.message ?? 'is not valid'}.`,
        where
      );
  }
}

function placeholders(data: Record<string, unknown>, found: Collector): void {
  const inputs = Object.keys(isPlainObject(data.inputs) ? data.inputs : {});
  const outputs = Object.keys(isPlainObject(data.outputs) ? data.outputs : {});
  for (const key of TEMPLATE_KEYS) {
    const template = getIn(data, key);
    if (typeof template !== 'string') {
      continue;
    }
    for (const pattern of [PLACEHOLDER, V2_PLACEHOLDER]) {
      for (const match of template.matchAll(pattern)) {
        const kind = match[1] as 'inputs' | 'outputs';
        const name = match[2];
        const declared = kind === 'inputs' ? inputs : outputs;
        if (declared.includes(name)) {
          continue;
        }
        const other = kind === 'inputs' ? 'outputs' : 'inputs';
        let fix: string;
        if ((kind === 'inputs' ? outputs : inputs).includes(name)) {
          fix = ` '${name}' is declared under ${other}: write {${other}.${name}}.`;
        } else {
          const hint = didYouMean(name, declared);
          fix = hint
            ? ` Did you mean {${kind}.${hint.slice(" Did you mean '".length, -2)}}?`
            : ` Fix: declare '${name}' under ${kind}:, or correct the name.`;
        }
        found.add(
          found.textInValue(key, match[0]),
          'error',
          `placeholder ${match[0]} names no declared ${kind.slice(0, -1)}.${fix}`,
          key.join('.')
        );
      }
    }
  }
}

/** Finds the source range of a path's key or value and collects diagnostics. */
class Collector {
  private items: ISpecDiagnostic[] = [];

  constructor(
    private text: string,
    private doc: Document,
    private lines: LineCounter
  ) {}

  add(range: Range, severity: Severity, message: string, path: string): void {
    const [from, to] = range;
    const { line, col } = this.lines.linePos(from);
    this.items.push({
      from,
      to: Math.max(to, from + 1),
      line,
      column: col,
      severity,
      message,
      path
    });
  }

  sorted(): ISpecDiagnostic[] {
    const seen = new Set<string>();
    return this.items
      .filter(d => {
        const id = `${d.from}:${d.message}`;
        return seen.has(id) ? false : (seen.add(id), true);
      })
      .sort((a, b) => a.from - b.from);
  }

  /** The key of `path` (its last segment); the first key of the spec for the root. */
  keyRange(path: Segment[]): Range {
    if (path.length === 0) {
      return this.firstKey();
    }
    const parent = this.node(path.slice(0, -1));
    if (isMap(parent)) {
      for (const pair of parent.items) {
        if (
          isPair(pair) &&
          isScalar(pair.key) &&
          String(pair.key.value) === String(path[path.length - 1])
        ) {
          return rangeOf(pair.key as Node) ?? this.firstKey();
        }
      }
    }
    return this.valueRange(path);
  }

  /** The value of `path`; falls back to its key, then to the nearest ancestor found. */
  valueRange(path: Segment[]): Range {
    for (let depth = path.length; depth >= 0; depth--) {
      const node = this.node(path.slice(0, depth));
      const range = node ? rangeOf(node) : null;
      if (range && (depth > 0 || path.length === 0)) {
        if (
          depth === path.length &&
          (isMap(node) || isSeq(node)) &&
          depth > 0
        ) {
          return this.keyRange(path); // a whole block: mark its key, not every line
        }
        return range;
      }
      if (depth < path.length && depth > 0) {
        return this.keyRange(path.slice(0, depth));
      }
    }
    return this.firstKey();
  }

  /** `needle` inside the source of the value at `path` (for placeholders). */
  textInValue(path: Segment[], needle: string): Range {
    const node = this.node(path);
    const range = node ? rangeOf(node) : null;
    if (range) {
      const at = this.text.indexOf(needle, range[0]);
      if (at >= 0 && at + needle.length <= range[1]) {
        return [at, at + needle.length];
      }
      return range;
    }
    return this.keyRange(path);
  }

  private node(path: Segment[]): unknown {
    if (path.length === 0) {
      return this.doc.contents;
    }
    return this.doc.getIn(path, true);
  }

  private firstKey(): Range {
    const root = this.doc.contents;
    if (isMap(root) && root.items.length && isScalar(root.items[0].key)) {
      return rangeOf(root.items[0].key as Node) ?? [0, 1];
    }
    const end = this.text.indexOf('\n');
    return [0, end < 0 ? this.text.length : end];
  }
}

function rangeOf(node: unknown): Range | null {
  const range = (node as Node | null)?.range;
  return range ? [range[0], range[1]] : null;
}

function pointerToPath(pointer: string): Segment[] {
  if (!pointer) {
    return [];
  }
  return pointer
    .slice(1)
    .split('/')
    .map(s => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map(s => (/^\d+$/.test(s) ? Number(s) : s));
}

function getIn(data: unknown, path: Segment[]): unknown {
  let value = data;
  for (const segment of path) {
    if (!isPlainObject(value)) {
      return undefined;
    }
    value = value[String(segment)];
  }
  return value;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function typeNames(type: unknown): string {
  const names = (Array.isArray(type) ? type : [type])
    .map(String)
    .filter(t => t !== 'null');
  return names.map(t => TYPE_NAMES[t] ?? article(t)).join(' or ');
}

/** What a kind of value is called in messages (spec_parsing/schema.py `_TYPE_NAMES`). */
const TYPE_NAMES: Record<string, string> = {
  string: 'a string',
  object: 'a mapping',
  array: 'a list',
  number: 'a number',
  integer: 'a whole number',
  boolean: 'true or false'
};

function alternatives(branches: JSONSchema[]): string {
  const names = branches.map(branch => {
    if (branch.type === 'array') {
      return 'a list of strings';
    }
    if (typeof branch.$ref === 'string' || branch.type === 'object') {
      return 'a mapping';
    }
    return typeNames(branch.type);
  });
  return [...new Set(names)].join(' or ');
}

function article(noun: string): string {
  return /^[aeiou]/.test(noun) ? `an ${noun}` : `a ${noun}`;
}

/** The kind of a value, as the kernel's `kind_of` names it. */
function kindName(value: unknown): string {
  if (Array.isArray(value)) {
    return 'list';
  }
  return typeof value === 'object' ? 'mapping' : typeof value;
}

/** A wrong value as the messages say it (spec_parsing/schema.py `got`): "a string 'x'". */
function got(value: unknown): string {
  if (value === null || value === undefined) {
    return 'nothing (null)';
  }
  if (Array.isArray(value)) {
    return 'a list';
  }
  if (typeof value === 'object') {
    return 'a mapping';
  }
  if (typeof value === 'string') {
    return `a string ${short(value)}`;
  }
  return `a ${typeof value} ${String(value)}`;
}

/** A string quoted as the kernel's messages quote it, cut to 40 characters. */
function short(value: string): string {
  const quoted = `'${value}'`;
  return quoted.length <= 40 ? quoted : quoted.slice(0, 37) + '...';
}

/** "a, b or c" */
function orList(items: readonly string[]): string {
  return items.length > 1
    ? `${items.slice(0, -1).join(', ')} or ${items[items.length - 1]}`
    : items.join('');
}

function firstSentence(message: string): string {
  return message.split('\n')[0];
}
