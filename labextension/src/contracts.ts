/**
 * The names the kernel and the extension share: jupyter_distcomp/contracts.json, the file
 * jupyter_distcomp/contracts.py reads, bundled at build time like the spec's schema.
 * Code that acts on one particular name (an action, a message type) takes it from here
 * through `named`, which fails at load time, and so in the unit tests, when the file no
 * longer lists that name.
 */
import contracts from '../../jupyter_distcomp/contracts.json';

import type {
  KernelMessage,
  RankAction,
  RankState
} from './messages.generated';
import type { JSONSchema } from './schema';

/** What is read here of a comm schema definition; ajv and the type generator read it all. */
interface IDefinition {
  enum?: string[];
  oneOf?: { $ref: string }[];
  properties?: Record<string, { const?: string }>;
}

interface IContracts {
  subcommands: string[];
  launchers: string[];
  launcher_aliases: Record<string, string>;
  v2_distributions: Record<string, string>;
  component_types: string[];
  parameter_types: Record<string, string>;
  parameter_type_names: string[];
  v2_data_types: string[];
  comm: {
    target: string;
    schema: JSONSchema & { definitions: Record<string, IDefinition> };
  };
}

const CONTRACTS = contracts as IContracts;

/** `%distcomp` subcommands; any other first word of `%%distcomp` names a component. */
export const SUBCOMMANDS: readonly string[] = CONTRACTS.subcommands;
/** Launcher types, as the model names them. */
export const LAUNCHERS: readonly string[] = CONTRACTS.launchers;
/** Other spellings of a launcher (lower case) -> its name. */
export const LAUNCHER_ALIASES: Readonly<Record<string, string>> =
  CONTRACTS.launcher_aliases;
/** v2 `distribution.type` (lower case) -> launcher. */
export const V2_DISTRIBUTIONS: Readonly<Record<string, string>> =
  CONTRACTS.v2_distributions;
/** The `type:` of a component spec (v1.5 names, then v2's `command`). */
export const COMPONENT_TYPES: readonly string[] = CONTRACTS.component_types;
/** How a spec may spell a parameter type (lower case) -> the normalised type. */
export const PARAMETER_TYPES: Readonly<Record<string, string>> =
  CONTRACTS.parameter_types;
/** The parameter types as messages name them. */
export const PARAMETER_TYPE_NAMES: readonly string[] =
  CONTRACTS.parameter_type_names;
/** v2 data types that are not parameters (besides names ending in directory, file, ...). */
export const V2_DATA_TYPES: readonly string[] = CONTRACTS.v2_data_types;

/** The ranks panel's comm: its target name and the JSON Schema of its messages. */
export const COMM_TARGET: string = CONTRACTS.comm.target;
export const COMM_SCHEMA: JSONSchema = CONTRACTS.comm.schema;

/**
 * What the comm schema's definition `name` holds at `key`; fails at load time, like `named`,
 * when contracts.json no longer has it.
 */
function fromDefinition<K extends keyof IDefinition>(
  name: string,
  key: K
): NonNullable<IDefinition[K]> {
  const value = CONTRACTS.comm.schema.definitions[name]?.[key];
  if (value === undefined) {
    throw new Error(
      `jupyter_distcomp/contracts.json: the comm schema's ${name} has no ${key}`
    );
  }
  return value;
}

/** What the panel may ask of a component's ranks. */
export const COMM_ACTIONS: readonly string[] = fromDefinition(
  'RankAction',
  'enum'
);
/** The definition of each message the kernel sends (KernelMessage's branches), by `type`. */
export const KERNEL_MESSAGE_DEFINITIONS: Readonly<Record<string, string>> =
  Object.fromEntries(
    fromDefinition('KernelMessage', 'oneOf').map(branch => {
      const name = branch.$ref.replace('#/definitions/', '');
      const type = fromDefinition(name, 'properties').type?.const;
      if (type === undefined) {
        throw new Error(
          `jupyter_distcomp/contracts.json: the comm schema's ${name} has no const type`
        );
      }
      return [type, name];
    })
  );
/** The `type` of each message the kernel sends. */
export const COMM_MESSAGES: readonly string[] = Object.keys(
  KERNEL_MESSAGE_DEFINITIONS
);
/** The states of a rank. */
export const RANK_STATES: readonly string[] = fromDefinition(
  'RankState',
  'enum'
);

/** `name`, after checking that `list` (a list of contracts.json) holds it. */
export function named<T extends string>(
  list: readonly string[],
  name: T,
  what: string
): T {
  if (!list.includes(name)) {
    throw new Error(
      `jupyter_distcomp/contracts.json lists no ${what} '${name}' (it lists ${list.join(', ')})`
    );
  }
  return name;
}

/** What the panel asks the kernel to do with a component's ranks. */
export const RANK_ACTION = {
  interrupt: named(COMM_ACTIONS, 'interrupt', 'comm action'),
  restart: named(COMM_ACTIONS, 'restart', 'comm action'),
  stop: named(COMM_ACTIONS, 'stop', 'comm action'),
  refresh: named(COMM_ACTIONS, 'refresh', 'comm action'),
  where: named(COMM_ACTIONS, 'where', 'comm action')
} as const satisfies { [A in RankAction]: A };

/** The `type` of a message from the kernel. */
export const COMM_MESSAGE = {
  snapshot: named(COMM_MESSAGES, 'snapshot', 'comm message type'),
  world: named(COMM_MESSAGES, 'world', 'comm message type'),
  result: named(COMM_MESSAGES, 'result', 'comm message type')
} as const satisfies { [T in KernelMessage['type']]: T };

/** The state of one rank, as the kernel reports it. */
export const RANK_STATE = {
  starting: named(RANK_STATES, 'starting', 'rank state'),
  idle: named(RANK_STATES, 'idle', 'rank state'),
  busy: named(RANK_STATES, 'busy', 'rank state'),
  dead: named(RANK_STATES, 'dead', 'rank state'),
  debugging: named(RANK_STATES, 'debugging', 'rank state')
} as const satisfies { [S in RankState]: S };
