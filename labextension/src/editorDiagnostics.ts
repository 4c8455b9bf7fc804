/**
 * Spec diagnostics in editor coordinates: the cell's text includes the `%%distcomp NAME`
 * line, the spec's positions do not. Kept apart from editor.ts so it is testable without
 * JupyterLab.
 */
import type { Diagnostic } from '@codemirror/lint';

import { bodyOffset, isSpecCell } from './detection';
import { specDiagnostics } from './diagnostics';

/**
 * CodeMirror diagnostics for a whole cell; none unless it defines a component. The spec's
 * messages mark code with backticks (as the kernel's do); the tooltip draws it as code, and
 * the plain message (what screen readers and the lint panel read) has no backticks.
 */
export function editorDiagnostics(text: string): Diagnostic[] {
  if (!isSpecCell(text)) {
    return [];
  }
  const base = bodyOffset(text);
  return specDiagnostics(text.slice(base)).map(d => ({
    from: base + d.from,
    to: Math.min(base + d.to, text.length),
    severity: d.severity,
    message: plainMessage(d.message),
    renderMessage: () => renderMessage(d.message),
    source: 'distcomp'
  }));
}

/** A message's runs of text and of code (what stands between backticks). */
export function messageParts(
  message: string
): { code: boolean; text: string }[] {
  return message
    .split('`')
    .map((text, index) => ({ code: index % 2 === 1, text }))
    .filter(part => part.text !== '');
}

/** The message as plain text: its code without the backticks around it. */
export function plainMessage(message: string): string {
  return messageParts(message)
    .map(part => part.text)
    .join('');
}

/** The tooltip's message: its code in `<code>`, the rest as text. */
function renderMessage(message: string): Node {
  const node = document.createElement('span');
  for (const part of messageParts(message)) {
    if (part.code) {
      const code = document.createElement('code');
      code.textContent = part.text;
      node.appendChild(code);
    } else {
      node.appendChild(document.createTextNode(part.text));
    }
  }
  return node;
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
