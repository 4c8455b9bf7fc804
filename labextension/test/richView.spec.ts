import { rankOfFrame, richViewId, richViewLabel } from '../src/richView';

describe('the rich view of a rank variable', () => {
  it('reads the rank of a Call Stack frame, none of a kernel frame', () => {
    expect(rankOfFrame('rank 2: <module>')).toBe(2);
    expect(rankOfFrame(' rank 13: step ')).toBe(13);
    expect(rankOfFrame('<module>')).toBeNull();
    expect(rankOfFrame('frank 2: f')).toBeNull();
    expect(rankOfFrame(null)).toBeNull();
  });

  it("uses JupyterLab's id of the view, and names the rank in its title", () => {
    expect(richViewId('x', 'dir/a.ipynb')).toBe(
      'jp-debugger-variable-mime-x-dir-a.ipynb'
    );
    expect(richViewLabel('x - a.ipynb', 'x', 1)).toBe('x (rank 1) - a.ipynb');
  });
});
