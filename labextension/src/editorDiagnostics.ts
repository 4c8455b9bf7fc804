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

/** "2 errors, 1 warning in this spec"; "" when there are none. */
export function diagnosticCount(severities: readonly string[]): string {
  const errors = severities.filter(s => s === 'error').length;
  const warnings = severities.length - errors;
  const parts = [
    errors ? `${errors} error${errors === 1 ? '' : 's'}` : '',
    warnings ? `${warnings} warning${warnings === 1 ? '' : 's'}` : ''
  ].filter(Boolean);
  return parts.length ? `${parts.join(', ')} in this spec` : '';
}
