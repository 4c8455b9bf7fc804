/**
 * One rank's share of a `%%distcomp run` cell's output (pure: no DOM, no JupyterLab).
 *
 * The kernel labels every line a rank prints (`[rank 3] ...`, `[node 1 rank 3] ...`) and
 * marks each display of a rank with `metadata.distcomp_rank` (a line it shows in place, such
 * as a tqdm bar, also with `metadata.distcomp_stream`). The per-rank view keeps the outputs
 * of one rank, every line of it without its label, and what belongs to no rank (the cell's
 * own errors and notices) where it came.
 */

/** The label before a rank's line; group 1 is the rank. */
export const LABEL = /^\[(?:node \d+ )?rank (\d+)\](?: |$)/;

/** The part of an nbformat output the view reads. */
export interface IOutputLike {
  output_type: string;
  name?: string;
  text?: string | string[];
  data?: Record<string, unknown>;
  metadata?: Record<string, unknown>;
  [key: string]: unknown;
}

/** A run of text lines (one stream) or one output shown as it is. */
export type RankItem =
  | { kind: 'text'; stream: string; text: string }
  | { kind: 'output'; output: IOutputLike };

function textOf(output: IOutputLike): string {
  const text = output.text ?? '';
  return Array.isArray(text) ? text.join('') : text;
}

/**
 * A rank's line shown in place (a progress bar redrawn with `\r`, a line that waited for
 * its end): a display the kernel marks with the line's stream, its text the labelled line.
 * Its stream and text, or null for any other output.
 */
export function inPlaceLine(
  output: IOutputLike
): { stream: string; text: string } | null {
  const stream = output.metadata?.['distcomp_stream'];
  const plain = output.data?.['text/plain'];
  if (typeof stream !== 'string' || plain === undefined) {
    return null;
  }
  const text = Array.isArray(plain) ? plain.join('') : String(plain);
  return { stream, text };
}

/** The rank an output belongs to (its metadata), or null. */
export function outputRank(output: IOutputLike): number | null {
  const rank = output.metadata?.['distcomp_rank'];
  return typeof rank === 'number' ? rank : null;
}

/** The ranks that printed or displayed something, in order. */
export function ranksOf(outputs: IOutputLike[]): number[] {
  const ranks = new Set<number>();
  for (const output of outputs) {
    if (output.output_type === 'stream') {
      for (const line of textOf(output).split('\n')) {
        const match = LABEL.exec(line);
        if (match) {
          ranks.add(Number(match[1]));
        }
      }
    } else {
      const rank = outputRank(output);
      if (rank !== null) {
        ranks.add(rank);
      }
    }
  }
  return [...ranks].sort((a, b) => a - b);
}

/**
 * What the view of `rank` shows: its lines without their labels, its displays, and the
 * lines and outputs of no rank; consecutive lines of one stream are one item.
 */
export function outputsOfRank(
  outputs: IOutputLike[],
  rank: number
): RankItem[] {
  const items: RankItem[] = [];
  const addText = (stream: string, line: string) => {
    const last = items[items.length - 1];
    if (last && last.kind === 'text' && last.stream === stream) {
      last.text += line + '\n';
    } else {
      items.push({ kind: 'text', stream, text: line + '\n' });
    }
  };
  for (const output of outputs) {
    if (output.output_type === 'stream') {
      const stream = output.name ?? 'stdout';
      const lines = textOf(output).split('\n');
      if (lines[lines.length - 1] === '') {
        lines.pop();
      }
      for (const line of lines) {
        const match = LABEL.exec(line);
        if (!match) {
          addText(stream, line);
        } else if (Number(match[1]) === rank) {
          const rest = line.slice(match[0].length);
          if (rest !== '') {
            addText(stream, rest); // the label alone heads a display: the view needs none
          }
        }
      }
      continue;
    }
    const owner = outputRank(output);
    const line = inPlaceLine(output);
    if (line !== null) {
      if (owner === rank) {
        // a line as the rank printed it: without its label, as its other lines
        const match = LABEL.exec(line.text);
        addText(
          line.stream,
          match ? line.text.slice(match[0].length) : line.text
        );
      }
    } else if (owner === null || owner === rank) {
      items.push({ kind: 'output', output });
    }
  }
  return items;
}

/** True for a `%%distcomp run` cell (its output is labelled by rank). */
export function isRunCell(source: string): boolean {
  return /^%%distcomp[ \t]+run\b/.test(source.trimStart());
}
