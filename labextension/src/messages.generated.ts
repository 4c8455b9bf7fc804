/**
 * The messages of the ranks panel's comm, each way: generated from the `comm.schema`
 * definitions of jupyter_distcomp/contracts.json by scripts/messages.mjs. Do not edit;
 * change contracts.json, then run `jlpm run generate:messages`.
 */

/**
 * Anything either side sends over the comm.
 */
export type CommMessage = KernelMessage | IRankRequest;
/**
 * Anything the kernel sends to the panel.
 */
export type KernelMessage = ISnapshotMessage | IWorldMessage | IResultMessage;
/**
 * The state of one rank.
 */
export type RankState = 'starting' | 'idle' | 'busy' | 'debugging' | 'dead';
/**
 * What the panel asks the kernel to do with a component's ranks.
 */
export type RankAction = 'interrupt' | 'restart' | 'stop' | 'refresh' | 'where';

/**
 * Kernel -> panel, on open and on refresh: every world.
 */
export interface ISnapshotMessage {
  type: 'snapshot';
  worlds: IWorld[];
}
/**
 * The ranks of one component.
 */
export interface IWorld {
  name: string;
  instance_count: number;
  process_count_per_node: number;
  /**
   * the ranks are gone
   */
  stopped: boolean;
  /**
   * what the next run changes, while the settings no longer match the running ranks (core/summary.py pending_text); null while they match
   */
  pending: string | null;
  /**
   * a `%%distcomp run NAME --background` cell runs on them
   */
  background: boolean;
  /**
   * while a cell's ranks hang (the hang notice was given): what they wait for, deadlocks and collective verdicts with their fix (core/hangs.py); null otherwise
   */
  hang: string | null;
  ranks: IRank[];
}
/**
 * One rank of a world.
 */
export interface IRank {
  rank: number;
  node: number;
  local_rank: number;
  state: RankState;
  pid: number | null;
  /**
   * the CUDA devices the rank holds memory on, with the memory in use and its peak (local/ranks/gpu.py short_text); absent where none
   */
  gpu?: string;
}
/**
 * Kernel -> panel: a world changed (its `stopped` says when its ranks are gone).
 */
export interface IWorldMessage {
  type: 'world';
  world: IWorld;
}
/**
 * Kernel -> panel: how a request ended; for `where`, `message` is each rank's stack as text. `action` and `name` echo the request, also one the kernel could not read.
 */
export interface IResultMessage {
  type: 'result';
  action: string | null;
  name: string | null;
  ok: boolean;
  message: string;
}
/**
 * Panel -> kernel: act on the ranks of component `name` (refresh: every component).
 */
export interface IRankRequest {
  action: RankAction;
  name: string;
}
