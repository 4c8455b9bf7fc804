/**
 * Tab in a spec cell offers what the kernel offers there: the spec's keys and the allowed
 * `type:` values (jupyter_distcomp/notebook/completion.py).
 *
 * JupyterLab merges the kernel's offers with its context completer's, which are the words
 * of the cell (`name`, `:`, `0.0.1`, `$schema`): YAML tokens, no spec keys. That completer
 * takes them from the editor's getTokens(), its only caller, so the editor of a spec cell
 * reports no tokens; every other cell keeps its words.
 */
import { CodeMirrorEditor } from '@jupyterlab/codemirror';

import { isSpecCell } from './detection';

let installed = false;

/** Make spec cells' editors report no tokens to the context completer (once). */
export function leaveCellWordsOutOfSpecCompletion(): void {
  if (installed) {
    return;
  }
  installed = true;
  const getTokens = CodeMirrorEditor.prototype.getTokens;
  CodeMirrorEditor.prototype.getTokens = function (this: CodeMirrorEditor) {
    return isSpecCell(this.model.sharedModel.getSource())
      ? []
      : getTokens.call(this);
  };
}
