/**
 * Which cells are component specs.
 *
 * `%%distcomp` and `%%distcomp NAME` define a component: the body is YAML. Every other form
 * (`%%distcomp run NAME`, `%%distcomp status`, ...) is a subcommand whose body is Python,
 * so it keeps the notebook's language. The subcommands come from contracts.json.
 */
import { SUBCOMMANDS } from './contracts';

const MAGIC = /^%%distcomp(?:[ \t]+(.*))?$/;

/** The first line of a cell, without its line break. */
export function firstLine(text: string): string {
  const end = text.indexOf('\n');
  return (end < 0 ? text : text.slice(0, end)).replace(/\r$/, '');
}

/**
 * True when the cell defines a component (`%%distcomp` or `%%distcomp NAME`): its body
 * is a YAML spec. False for subcommands, flags, other magics and plain code.
 */
export function isSpecCell(text: string): boolean {
  const match = MAGIC.exec(firstLine(text).trimEnd());
  if (!match) {
    return false;
  }
  const words = (match[1] ?? '').trim().split(/\s+/).filter(Boolean);
  if (words.length === 0) {
    return true;
  }
  return (
    words.length === 1 &&
    !SUBCOMMANDS.includes(words[0]) &&
    !words[0].startsWith('-')
  );
}

/** The component name of a spec cell (`%%distcomp NAME`), or null. */
export function specName(text: string): string | null {
  if (!isSpecCell(text)) {
    return null;
  }
  const rest = firstLine(text).slice('%%distcomp'.length).trim();
  return rest || null;
}

/**
 * Where the YAML body starts: the offset just after the first line break (the text's
 * length when the cell is the magic line alone).
 */
export function bodyOffset(text: string): number {
  const end = text.indexOf('\n');
  return end < 0 ? text.length : end + 1;
}
