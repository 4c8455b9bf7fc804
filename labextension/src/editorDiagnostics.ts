/**
 * Spec diagnostics in editor coordinates: the cell's text includes the `%%distcomp NAME`
 * line, the spec's positions do not. Kept apart from editor.ts so it is testable without
 * JupyterLab.
 */
import type { Diagnostic } from '@codemirror/lint';

import { bodyOffset, isSpecCell } from './detection';
import { specDiagnostics } from './diagnostics';

/** CodeMirror diagnostics for a whole cell; none unless it defines a component. */
export function editorDiagnostics(text: string): Diagnostic[] {
  if (!isSpecCell(text)) {
    return [];
  }
  const base = bodyOffset(text);
  return specDiagnostics(text.slice(base)).map(d => ({
    from: base + d.from,
    to: Math.min(base + d.to, text.length),
    severity: d.severity,
    message: d.message,
    source: 'distcomp'
  }));
}
