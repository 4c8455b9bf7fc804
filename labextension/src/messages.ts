/**
 * The messages of the ranks panel's comm: their types, generated from contracts.json's comm
 * schema (messages.generated.ts), and a check of what the kernel sends against that same
 * schema, which the kernel's own tests check its messages with.
 */
import Ajv, { ErrorObject, ValidateFunction } from 'ajv';

import {
  COMM_MESSAGES,
  COMM_SCHEMA,
  KERNEL_MESSAGE_DEFINITIONS
} from './contracts';
import type { KernelMessage } from './messages.generated';

export type * from './messages.generated';

/** A message from the kernel once checked: the message, or null and what did not match. */
export type ParsedKernelMessage =
  { message: KernelMessage; reason: null } | { message: null; reason: string };

// Strict, unlike the spec diagnostics' ajv: this schema is ours, so a misspelt keyword
// fails when the validator compiles (in the unit tests too) instead of checking nothing.
// `pid` and a result's `action` and `name` may be null: union types are allowed.
const ajv = new Ajv({ allErrors: true, strict: true, allowUnionTypes: true });
const validators = new Map<string, ValidateFunction>();

/**
 * The check of one definition of the comm schema (`KernelMessage`, `RankRequest`, ...), as
 * the kernel compiles it (jupyter_distcomp/notebook/comm.py `validator`).
 */
export function validator<T = unknown>(
  definition: string
): ValidateFunction<T> {
  let validate = validators.get(definition) as ValidateFunction<T> | undefined;
  if (!validate) {
    validate = ajv.compile({
      ...COMM_SCHEMA,
      $ref: `#/definitions/${definition}`
    });
    validators.set(definition, validate);
  }
  return validate;
}

/**
 * `data` as a message from the kernel, when the comm schema's `KernelMessage` accepts it. A
 * kernel of another version may send something else: the reason then says what did not
 * match, checked against the message its `type` names (or saying that type is unknown).
 */
export function parseKernelMessage(data: unknown): ParsedKernelMessage {
  if (validator<KernelMessage>('KernelMessage')(data)) {
    return { message: data, reason: null };
  }
  const type = isObject(data) ? data.type : undefined;
  if (typeof type !== 'string' || !COMM_MESSAGES.includes(type)) {
    const given =
      type === undefined ? 'no type' : `type ${JSON.stringify(type)}`;
    return {
      message: null,
      reason: `${given}, expected one of ${COMM_MESSAGES.join(', ')}`
    };
  }
  const branch = validator(KERNEL_MESSAGE_DEFINITIONS[type]);
  branch(data);
  return { message: null, reason: describe(branch.errors ?? []) };
}

/** Ajv's errors as one line: where in the message, and what is wrong there. */
function describe(errors: ErrorObject[]): string {
  return errors
    .map(error => {
      const where = error.instancePath || 'the message';
      switch (error.keyword) {
        case 'additionalProperties':
          return `${where} has an unknown property '${String(error.params.additionalProperty)}'`;
        case 'enum':
          return `${where} must be one of ${(error.params.allowedValues as unknown[]).join(', ')}`;
        default:
          return `${where} ${error.message ?? 'is not valid'}`;
      }
    })
    .join('; ');
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
