/**
 * The ranks comm's messages against contracts.json's comm schema, the definitions the kernel's
 * tests check its side with: every kind of message the kernel sends passes, malformed ones are
 * rejected with a reason, and every request the panel may send is a valid RankRequest.
 */
import { COMM_ACTIONS, RANK_ACTION } from '../src/contracts';
import {
  IRank,
  IRankRequest,
  IResultMessage,
  ISnapshotMessage,
  IWorld,
  IWorldMessage,
  KernelMessage,
  parseKernelMessage,
  RankAction,
  validator
} from '../src/messages';

const rank: IRank = {
  rank: 0,
  node: 0,
  local_rank: 0,
  state: 'idle',
  pid: 4242
};
const world: IWorld = {
  name: 'train',
  instance_count: 1,
  process_count_per_node: 2,
  stopped: false,
  pending: null,
  background: false,
  hang: null,
  ranks: [
    rank,
    { ...rank, rank: 1, local_rank: 1, state: 'starting', pid: null }
  ]
};
const snapshot: ISnapshotMessage = { type: 'snapshot', worlds: [world] };
const changed: IWorldMessage = {
  type: 'world',
  world: { ...world, stopped: true, background: true }
};
const result: IResultMessage = {
  type: 'result',
  action: 'where',
  name: 'train',
  ok: true,
  message: 'rank 0:\n  File "train.py", line 3'
};
// what the kernel answers to a request it could not read
const unreadable: IResultMessage = {
  type: 'result',
  action: null,
  name: null,
  ok: false,
  message: 'not a request'
};

/** A copy of `value` without its property `key`. */
function without<T extends object>(value: T, key: keyof T): Partial<T> {
  const copy = { ...value };
  delete copy[key];
  return copy;
}

/** The reason `data` is not a message from the kernel (fails when it is one). */
function rejection(data: unknown): string {
  const parsed = parseKernelMessage(data);
  expect(parsed.message).toBeNull();
  return parsed.reason ?? '';
}

describe('messages from the kernel', () => {
  it.each<[string, KernelMessage]>([
    ['a snapshot', snapshot],
    ['an empty snapshot', { type: 'snapshot', worlds: [] }],
    ['a world', changed],
    ['a result', result],
    ['the result of a request the kernel could not read', unreadable]
  ])('%s passes', (_, message) => {
    expect(parseKernelMessage(message)).toEqual({ message, reason: null });
  });

  it('are rejected when a field is missing', () => {
    expect(rejection(without(snapshot, 'worlds'))).toBe(
      "the message must have required property 'worlds'"
    );
    expect(
      rejection({
        ...snapshot,
        worlds: [{ ...world, ranks: [without(rank, 'pid')] }]
      })
    ).toBe("/worlds/0/ranks/0 must have required property 'pid'");
  });

  it('are rejected when their type is unknown or missing', () => {
    expect(rejection({ ...result, type: 'dance' })).toBe(
      'type "dance", expected one of snapshot, world, result'
    );
    expect(rejection(without(result, 'type'))).toBe(
      'no type, expected one of snapshot, world, result'
    );
    expect(rejection('snapshot')).toMatch(/^no type/);
    expect(rejection(null)).toMatch(/^no type/);
  });

  it('are rejected when a rank is in a state not listed', () => {
    const sleeping = { ...rank, state: 'sleeping' };
    expect(
      rejection({ ...changed, world: { ...world, ranks: [sleeping] } })
    ).toBe(
      '/world/ranks/0/state must be one of starting, idle, busy, debugging, dead'
    );
  });

  it('are rejected when they have a property not defined', () => {
    expect(rejection({ ...result, extra: 1 })).toBe(
      "the message has an unknown property 'extra'"
    );
    expect(
      rejection({ ...snapshot, worlds: [{ ...world, color: 'red' }] })
    ).toBe("/worlds/0 has an unknown property 'color'");
  });

  it('are rejected with every problem named', () => {
    expect(rejection({ ...without(result, 'message'), ok: 'yes' })).toBe(
      "the message must have required property 'message'; /ok must be boolean"
    );
  });
});

describe('requests from the panel', () => {
  it.each(Object.values(RANK_ACTION))('%s is a valid RankRequest', action => {
    const request: IRankRequest = { action, name: 'train' };
    const validate = validator<IRankRequest>('RankRequest');
    expect(validate(request)).toBe(true);
    expect(validate.errors ?? null).toBeNull();
  });

  it('cover every action of the schema', () => {
    const actions: RankAction[] = Object.values(RANK_ACTION);
    expect([...actions].sort()).toEqual([...COMM_ACTIONS].sort());
  });

  it('are refused when malformed, as the kernel refuses them', () => {
    const validate = validator('RankRequest');
    expect(validate({ action: 'dance', name: 'train' })).toBe(false);
    expect(validate({ action: 'stop' })).toBe(false);
    expect(validate({ action: 'stop', name: 'train', force: true })).toBe(
      false
    );
  });
});
