/**
 * The kernel's rules for each input of a spec (jupyter_distcomp/core/spec_parsing/loader.py
 * `_input` and jupyter_distcomp/core/values.py `coerce_value`), for the editor: a misspelt
 * parameter type, a default that its type refuses, `min` / `max` / `enum` where they do not
 * apply. The type spellings come from contracts.json, which the kernel reads too; the
 * messages are the kernel's, so a user reads the same sentence while typing and when the
 * cell runs.
 * tests/data/bad_specs.json holds a spec for each rule, checked by both test suites.
 */
import {
  PARAMETER_TYPE_NAMES,
  PARAMETER_TYPES,
  V2_DATA_TYPES
} from './contracts';
import { closest, didYouMean } from './suggest';

type Segment = string | number;

/** Where a rule's error goes: the key (or value) of `path`, as Collector does it. */
export interface IInputSink {
  error(path: Segment[], at: 'key' | 'value', message: string): void;
}

/** Check every input of `data` (a parsed spec) by the kernel's rules. */
export function inputRules(
  data: Record<string, unknown>,
  sink: IInputSink
): void {
  const inputs = data.inputs;
  if (!isMapping(inputs)) {
    return;
  }
  for (const [name, spec] of Object.entries(inputs)) {
    if (isMapping(spec) && 'type' in spec) {
      checkInput(name, spec, sink);
    }
  }
}

function checkInput(
  name: string,
  spec: Record<string, unknown>,
  sink: IInputSink
): void {
  const path = ['inputs', name];
  const typeValue = spec.type;
  if (Array.isArray(typeValue)) {
    return;
  }
  const param = parameterType(String(typeValue));
  if (param === undefined) {
    const guess = closest(String(typeValue), PARAMETER_TYPE_NAMES, 0.75);
    sink.error(
      [...path, 'type'],
      'value',
      `unknown input type ${pyRepr(typeValue)}. Did you mean '${guess}'? Parameter types are ` +
        `${PARAMETER_TYPE_NAMES.join(', ')}; any other name (path, AnyDirectory, AnyFile, ...) ` +
        'is a data input.'
    );
    return;
  }
  const enumValues = spec.enum ?? spec.enum_values;
  if (param === null) {
    for (const key of ['min', 'max', 'enum']) {
      if (spec[key] !== undefined && spec[key] !== null) {
        sink.error(
          [...path, key],
          'key',
          `'${key}' applies to parameters, but input '${name}' has data type ` +
            `${pyRepr(typeValue)}. Fix: remove '${key}', or use a parameter type ` +
            '(Integer, Float, Enum).'
        );
      }
    }
    return;
  }
  const min = typeof spec.min === 'number' ? spec.min : null;
  const max = typeof spec.max === 'number' ? spec.max : null;
  if (
    (min !== null || max !== null) &&
    param !== 'integer' &&
    param !== 'number'
  ) {
    const key = min !== null ? 'min' : 'max';
    sink.error(
      [...path, key],
      'key',
      `'${key}' applies to Integer and Float inputs, not ${pyRepr(typeValue)}. ` +
        `Fix: remove '${key}' or change the type.`
    );
    return;
  }
  if (min !== null && max !== null && min > max) {
    sink.error(
      [...path, 'min'],
      'value',
      `min (${min}) is greater than max (${max}) for input '${name}'. Fix: swap them.`
    );
    return;
  }
  const choices = Array.isArray(enumValues) ? enumValues.map(String) : null;
  if (param === 'enum' && !choices?.length) {
    sink.error(
      [...path, 'type'],
      'key',
      `Enum input '${name}' lists no values. Fix: add \`enum: [a, b]\`.`
    );
    return;
  }
  if (spec.default !== undefined && spec.default !== null) {
    const problem = valueProblem(name, param, spec.default, min, max, choices);
    if (problem) {
      sink.error(
        [...path, 'default'],
        'value',
        `default ${pyRepr(spec.default)}: ${problem}`
      );
    }
  }
}

/** The normalised parameter type; null for a data input; undefined for a misspelt parameter. */
function parameterType(type: string): string | null | undefined {
  const lowered = type.toLowerCase();
  if (lowered in PARAMETER_TYPES) {
    return PARAMETER_TYPES[lowered];
  }
  if (
    V2_DATA_TYPES.includes(lowered) ||
    /(directory|file|folder|path)$/.test(lowered)
  ) {
    return null;
  }
  return closest(type, PARAMETER_TYPE_NAMES, 0.75) ? undefined : null;
}

/** What `coerce_value` would say of `value`, or '' when it accepts it. */
function valueProblem(
  name: string,
  param: string,
  value: unknown,
  min: number | null,
  max: number | null,
  choices: string[] | null
): string {
  if (param === 'boolean') {
    const text = String(value).trim().toLowerCase();
    return typeof value === 'boolean' ||
      ['true', '1', 'yes', 'false', '0', 'no'].includes(text)
      ? ''
      : `input '${name}' is Boolean: use True or False, not ${pyRepr(value)}.`;
  }
  if (param === 'integer' || param === 'number') {
    if (typeof value === 'boolean') {
      return `input '${name}' is ${param}: got a boolean ${pyRepr(value)}.`;
    }
    const number = toNumber(value, param === 'integer');
    if (number === null) {
      const [type, example] =
        param === 'integer' ? ['Integer', '3'] : ['Float', '0.01'];
      return (
        `input '${name}' is ${type}: ${pyRepr(value)} is not a number. ` +
        `Fix: give a value such as ${example}.`
      );
    }
    if (min !== null && number < min) {
      return `input '${name}' must be at least ${min}, got ${number}.`;
    }
    if (max !== null && number > max) {
      return `input '${name}' must be at most ${max}, got ${number}.`;
    }
    return '';
  }
  if (param === 'enum' && choices && !choices.includes(String(value))) {
    return (
      `input '${name}' must be one of ${choices.join(', ')}; got ${pyRepr(String(value))}.` +
      didYouMean(String(value), choices)
    );
  }
  return '';
}

function toNumber(value: unknown, integer: boolean): number | null {
  if (typeof value === 'number') {
    return !integer || Number.isInteger(value) ? value : null;
  }
  const text = String(value).trim();
  if (integer) {
    return /^[+-]?\d+(_\d+)*$/.test(text)
      ? Number(text.replace(/_/g, ''))
      : null;
  }
  if (/^[+-]?(inf(inity)?|nan)$/i.test(text)) {
    return text.toLowerCase().includes('nan')
      ? NaN
      : text.startsWith('-')
        ? -Infinity
        : Infinity;
  }
  return /^[+-]?(\d+(_\d+)*)?(\.\d*)?([eE][+-]?\d+)?$/.test(text) &&
    /\d/.test(text)
    ? Number(text.replace(/_/g, ''))
    : null;
}

/** A value as Python's repr() shows it in the kernel's messages. */
function pyRepr(value: unknown): string {
  if (typeof value === 'string') {
    return `'${value}'`;
  }
  if (typeof value === 'boolean') {
    return value ? 'True' : 'False';
  }
  return String(value);
}

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
