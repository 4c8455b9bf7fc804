import {
  IOutputLike,
  isRunCell,
  outputsOfRank,
  ranksOf
} from '../src/rankLines';

const stream = (text: string, name = 'stdout'): IOutputLike => ({
  output_type: 'stream',
  name,
  text
});
const display = (text: string, rank?: number): IOutputLike => ({
  output_type: 'display_data',
  data: { 'text/plain': text },
  metadata: rank === undefined ? {} : { distcomp_rank: rank }
});
/** a rank's line shown in place (a tqdm bar), as the kernel sends it */
const inPlace = (text: string, rank: number, name = 'stderr'): IOutputLike => ({
  output_type: 'display_data',
  data: { 'text/plain': text },
  metadata: { distcomp_rank: rank, distcomp_stream: name }
});

describe('ranksOf', () => {
  it('finds the ranks of labelled lines and displays, with nodes', () => {
    const outputs = [
      stream('[rank 1] a\n[rank 0] b\nplain\n'),
      stream('[node 1 rank 3] c\n', 'stderr'),
      display('x', 12)
    ];
    expect(ranksOf(outputs)).toEqual([0, 1, 3, 12]);
  });

  it('needs a label at the start of a line', () => {
    expect(ranksOf([stream('say [rank 1] x\n[rank 2]x\n')])).toEqual([]);
  });
});

describe('outputsOfRank', () => {
  const outputs = [
    stream('[rank 0] a\n[rank 1] b\n[rank 0] c\n'),
    stream('[rank 1] oops\n', 'stderr'),
    stream('[rank 1]\n'),
    display('fig', 1),
    inPlace('[rank 0] 100%|###|', 0),
    display('ranks ready'),
    stream('distcomp: a notice\n', 'stderr'),
    inPlace('[node 0 rank 1] 40%|#  |', 1)
  ];

  it('keeps one rank, without labels, and what belongs to no rank', () => {
    expect(outputsOfRank(outputs, 1)).toEqual([
      { kind: 'text', stream: 'stdout', text: 'b\n' },
      { kind: 'text', stream: 'stderr', text: 'oops\n' },
      { kind: 'output', output: outputs[3] },
      { kind: 'output', output: outputs[5] },
      { kind: 'text', stream: 'stderr', text: 'distcomp: a notice\n40%|#  |\n' }
    ]);
  });

  it('joins the lines of one stream; a bar shown in place is a line, unlabelled', () => {
    expect(outputsOfRank(outputs, 0).slice(0, 2)).toEqual([
      { kind: 'text', stream: 'stdout', text: 'a\nc\n' },
      { kind: 'text', stream: 'stderr', text: '100%|###|\n' }
    ]);
  });

  it('reads text given as a list of strings', () => {
    const listed: IOutputLike = {
      output_type: 'stream',
      name: 'stdout',
      text: ['[rank 2] x\n', '[rank 2] y\n']
    };
    expect(outputsOfRank([listed], 2)).toEqual([
      { kind: 'text', stream: 'stdout', text: 'x\ny\n' }
    ]);
  });
});

describe('isRunCell', () => {
  it.each([
    ['%%distcomp run train\nprint(1)', true],
    ['\n%%distcomp run train --ranks 0', true],
    ['%%distcomp train\nname: x', false],
    ['%%distcomp runner\n', false],
    ['print(1)', false]
  ])('%j', (source, expected) => {
    expect(isRunCell(source)).toBe(expected);
  });
});
