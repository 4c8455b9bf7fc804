/**
 * Spec cells in the editor: YAML highlighting and live diagnostics.
 *
 * Highlighting switches the cell's mimetype to YAML while its first line is `%%distcomp` or
 * `%%distcomp NAME` (JupyterLab then loads its YAML CodeMirror language for that cell only).
 * The notebook resets every code cell's mimetype when the kernel's language_info arrives,
 * and languages load asynchronously, so setting it once loses that race: we re-apply when
 * the mimetype changes under us, after the YAML language has loaded, and once more on the
 * next tick.
 *
 * Diagnostics are a CodeMirror lint source added through JupyterLab's editor-extension
 * registry to the editors that hold a spec cell, and to them only (a plain cell's editor
 * gets nothing from us: no gutter, no panel). Each marked line gets a sign in a lint gutter
 * (shown only while it holds one, style/base.css) and a line under the editor counts them
 * ("2 errors, 1 warning in this spec").
 *
 * Tab in a spec cell offers what the kernel offers there: the spec's keys and the allowed
 * `type:` values (jupyter_distcomp/notebook/completion.py). JupyterLab merges those with
 * its context completer's offers, the words of the cell (`name`, `:`, `0.0.1`), which it
 * takes from the editor's getTokens(), its only caller: a spec cell's editor reports none.
 */
import { forEachDiagnostic, lintGutter, linter } from '@codemirror/lint';
import { Compartment, EditorState, Extension } from '@codemirror/state';
import { EditorView, Panel, showPanel } from '@codemirror/view';
import {
  CodeMirrorEditor,
  EditorExtensionRegistry,
  IEditorExtensionRegistry,
  IEditorLanguageRegistry
} from '@jupyterlab/codemirror';
import { ICellModel } from '@jupyterlab/cells';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { isSpecCell } from './detection';
import { diagnosticCount, editorDiagnostics } from './editorDiagnostics';

export const YAML_MIMETYPE = 'text/x-yaml';

/** The plugin's settings (schema/plugin.json), read live. */
export interface IEditorSettings {
  highlighting: boolean;
  diagnostics: boolean;
  diagnosticsDelay: number;
}

export function registerDiagnostics(
  registry: IEditorExtensionRegistry,
  settings: IEditorSettings
): void {
  const specOnly: Extension = [
    lintGutter(),
    showPanel.of(countPanel),
    linter(
      (view: EditorView) => {
        const found = settings.diagnostics
          ? editorDiagnostics(view.state.doc.toString())
          : [];
        // what was checked, and with what result: UI tests wait for this, not a delay
        view.dom.dataset.distcompLinted = String(view.state.doc.length);
        view.dom.dataset.distcompDiagnostics = String(found.length);
        return found;
      },
      {
        delay: settings.diagnosticsDelay
      }
    )
  ];
  registry.addExtension({
    name: 'jupyter-distcomp:diagnostics',
    factory: options =>
      EditorExtensionRegistry.createImmutableExtension(
        onlyInSpecCells(specOnly, options.model.sharedModel.getSource())
      )
  });
}

/**
 * `extension` while the editor holds a spec cell, nothing otherwise: a plain cell's editor
 * gets no gutter, no panel and no linter from us, so it is drawn exactly as without this
 * extension. The editor starts with `source`; an edit that makes or unmakes a spec cell
 * switches the extension in the same transaction.
 */
function onlyInSpecCells(extension: Extension, source: string): Extension {
  const compartment = new Compartment();
  const none: Extension = [];
  return [
    compartment.of(isSpecCell(source) ? extension : none),
    EditorState.transactionExtender.of(transaction => {
      if (!transaction.docChanged) {
        return null;
      }
      const on = compartment.get(transaction.startState) === extension;
      const wanted = isSpecCell(transaction.newDoc.lineAt(0).text);
      return on === wanted
        ? null
        : { effects: compartment.reconfigure(wanted ? extension : none) };
    })
  ];
}

let tokensLeftOut = false;

/** Make spec cells' editors report no tokens to the context completer (once). */
export function leaveCellWordsOutOfSpecCompletion(): void {
  if (tokensLeftOut) {
    return;
  }
  tokensLeftOut = true;
  const getTokens = CodeMirrorEditor.prototype.getTokens;
  CodeMirrorEditor.prototype.getTokens = function (this: CodeMirrorEditor) {
    return isSpecCell(this.model.sharedModel.getSource())
      ? []
      : getTokens.call(this);
  };
}

/** The line under a spec cell's editor that counts its errors and warnings. */
function countPanel(view: EditorView): Panel {
  const dom = document.createElement('div');
  dom.className = 'distcomp-diagnostic-count';
  const render = (state: EditorState) => {
    const severities: string[] = [];
    forEachDiagnostic(state, d => severities.push(d.severity));
    const text = diagnosticCount(severities);
    dom.textContent = text;
    dom.hidden = !text;
    dom.classList.toggle('distcomp-has-errors', severities.includes('error'));
  };
  render(view.state);
  return { dom, top: false, update: update => render(update.state) };
}

/** Keeps each code cell's mimetype YAML exactly while it is a spec cell. */
export class SpecHighlighter {
  constructor(
    private tracker: INotebookTracker,
    private languages: IEditorLanguageRegistry,
    private settings: IEditorSettings
  ) {
    tracker.widgetAdded.connect((_, panel) => this.watch(panel));
    tracker.forEach(panel => this.watch(panel));
  }

  /** Re-evaluate every open notebook (after a settings change). */
  refresh(): void {
    this.tracker.forEach(panel =>
      this.forEachCell(panel, model => this.apply(panel, model))
    );
  }

  private watch(panel: NotebookPanel): void {
    const hook = () => {
      const cells = panel.content.model?.cells;
      if (!cells) {
        return;
      }
      this.forEachCell(panel, model => this.wire(panel, model));
      cells.changed.connect((_, change) => {
        if (change.type === 'add') {
          change.newValues.forEach(model => this.wire(panel, model));
        }
      });
    };
    if (panel.content.model) {
      hook();
    } else {
      panel.content.modelChanged.connect(hook);
    }
  }

  private forEachCell(
    panel: NotebookPanel,
    callback: (model: ICellModel) => void
  ): void {
    const cells = panel.content.model?.cells;
    if (cells) {
      for (let i = 0; i < cells.length; i++) {
        callback(cells.get(i));
      }
    }
  }

  private wire(panel: NotebookPanel, model: ICellModel): void {
    if (model.type !== 'code' || wired.has(model)) {
      return;
    }
    wired.add(model);
    const apply = () => this.apply(panel, model);
    model.contentChanged.connect(apply);
    model.mimeTypeChanged.connect((_, change) => {
      if (
        !toggling.has(model) &&
        change.newValue !== this.wanted(panel, model)
      ) {
        // The notebook reset it (language_info arrived). The editor is now loading that
        // language asynchronously: wait until both languages are loaded, then set ours
        // last, so the editor's final language is YAML.
        void Promise.all([
          this.languages.getLanguage(change.newValue),
          this.languages.getLanguage(YAML_MIMETYPE)
        ]).then(() => setTimeout(() => this.apply(panel, model, true), 0));
      }
    });
    apply();
  }

  private wanted(panel: NotebookPanel, model: ICellModel): string {
    const spec =
      this.settings.highlighting && isSpecCell(model.sharedModel.getSource());
    return spec ? YAML_MIMETYPE : panel.content.codeMimetype;
  }

  /** Set the wanted mimetype; `force` re-sets it so the editor reloads its language. */
  private apply(panel: NotebookPanel, model: ICellModel, force = false): void {
    if (model.isDisposed) {
      return;
    }
    const wanted = this.wanted(panel, model);
    if (model.mimeType !== wanted) {
      model.mimeType = wanted;
    } else if (force && wanted === YAML_MIMETYPE) {
      toggling.add(model);
      try {
        model.mimeType = panel.content.codeMimetype;
        model.mimeType = wanted;
      } finally {
        toggling.delete(model);
      }
    }
  }
}

const wired = new WeakSet<ICellModel>();
const toggling = new WeakSet<ICellModel>();
