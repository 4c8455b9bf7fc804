import { bodyOffset, firstLine, isSpecCell, specName } from '../src/detection';

describe('isSpecCell', () => {
  it.each([
    ['%%distcomp\nname: x', true],
    ['%%distcomp train\nname: x', true],
    ['%%distcomp train   \nname: x', true],
    ['%%distcomp train', true],
    ['%%distcomp train\r\nname: x', true]
  ])('%j is a spec cell', (text, expected) => {
    expect(isSpecCell(text)).toBe(expected);
  });

  it.each([
    '%%distcomp run train\nprint(1)',
    '%%distcomp run\nprint(1)',
    '%%distcomp status',
    '%%distcomp env train',
    '%%distcomp command train --input n=1',
    '%%distcomp stop train',
    '%%distcomp restart train',
    '%%distcomp list',
    '%%distcomp export train',
    '%%distcomp submit train',
    '%%distcomp widget train',
    '%%distcomp --help',
    '%%distcomp a b',
    '%distcomp train',
    '%%distcompx train',
    ' %%distcomp train',
    'print(1)\n%%distcomp train',
    '%%px\nprint(1)',
    ''
  ])('%j is not a spec cell', text => {
    expect(isSpecCell(text)).toBe(false);
  });
});

describe('helpers', () => {
  it('names the component and finds the YAML body', () => {
    const text = '%%distcomp train\nname: x\n';
    expect(specName(text)).toBe('train');
    expect(specName('%%distcomp\nname: x')).toBeNull();
    expect(specName('%%distcomp run train')).toBeNull();
    expect(firstLine(text)).toBe('%%distcomp train');
    expect(text.slice(bodyOffset(text))).toBe('name: x\n');
    expect(bodyOffset('%%distcomp train')).toBe('%%distcomp train'.length);
  });
});
