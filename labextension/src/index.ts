/**
 * jupyter-distcomp for JupyterLab: one plugin per feature.
 *  - jupyter-distcomp:plugin     spec cells as YAML, live diagnostics (settings: schema/plugin.json),
 *                                Tab offering the kernel's spec keys without the cell's words
 *  - jupyter-distcomp:ranks      the ranks sidebar, the status bar item, "Show ranks panel"
 *  - jupyter-distcomp:rich-view  the debugger's rich view of the selected rank's variable
 *  - jupyter-distcomp:templates  "Insert %%distcomp template" commands for each launcher
 *  - jupyter-distcomp:rank-view  run cells' output read merged or one rank at a time
 */
import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { Debugger, IDebugger } from '@jupyterlab/debugger';
import {
  IEditorExtensionRegistry,
  IEditorLanguageRegistry
} from '@jupyterlab/codemirror';
import {
  INotebookTracker,
  NotebookActions,
  NotebookPanel
} from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import {
  IEditorSettings,
  leaveCellWordsOutOfSpecCompletion,
  registerDiagnostics,
  SpecHighlighter
} from './editor';
import { RanksService } from './ranks';
import { RanksPanel, RanksStatus } from './ranksPanel';
import { RankRichViews } from './richView';
import { templateSource, TEMPLATES } from './templates';

namespace CommandIDs {
  export const showRanks = 'distcomp:show-ranks';
  export const insertTemplate = 'distcomp:insert-template';
}

const CATEGORY = 'Distributed components';
const PLUGIN_ID = 'jupyter-distcomp:plugin';

const editorPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    '%%distcomp cells highlighted as YAML, with live diagnostics from the spec schema.',
  autoStart: true,
  requires: [
    INotebookTracker,
    IEditorLanguageRegistry,
    IEditorExtensionRegistry
  ],
  optional: [ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    languages: IEditorLanguageRegistry,
    extensions: IEditorExtensionRegistry,
    settingRegistry: ISettingRegistry | null
  ) => {
    const settings: IEditorSettings = {
      highlighting: true,
      diagnostics: true,
      diagnosticsDelay: 300
    };
    registerDiagnostics(extensions, settings);
    leaveCellWordsOutOfSpecCompletion();
    const highlighter = new SpecHighlighter(tracker, languages, settings);
    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(loaded => {
          const update = () => {
            settings.highlighting = loaded.get('highlighting')
              .composite as boolean;
            settings.diagnostics = loaded.get('diagnostics')
              .composite as boolean;
            settings.diagnosticsDelay = loaded.get('diagnosticsDelay')
              .composite as number;
            highlighter.refresh();
          };
          loaded.changed.connect(update);
          update();
        })
        .catch(reason => {
          // the defaults above stay in force
          console.error(`Failed to load settings for ${PLUGIN_ID}.`, reason);
        });
    }
  }
};

const ranksPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-distcomp:ranks',
  description:
    'A sidebar and a status bar item with the state of each rank of the active notebook.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ILabShell, IStatusBar, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    labShell: ILabShell | null,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null
  ) => {
    const service = new RanksService(tracker);
    const panel = new RanksPanel(service);
    // the left area: the debugger's sidebar opens on the right and would hide it there
    app.shell.add(panel, 'left', { rank: 900 });
    app.commands.addCommand(CommandIDs.showRanks, {
      label: 'Show distcomp ranks panel',
      caption:
        'The ranks of the active notebook: layout, state, interrupt/restart/stop',
      describedBy: { args: { type: 'object', properties: {} } },
      execute: () => app.shell.activateById(panel.id)
    });
    palette?.addItem({ command: CommandIDs.showRanks, category: CATEGORY });
    if (statusBar) {
      const item = new RanksStatus(
        service,
        () => void app.commands.execute(CommandIDs.showRanks)
      );
      statusBar.registerStatusItem('jupyter-distcomp:ranks-status', {
        item,
        align: 'left',
        rank: 4,
        isActive: () => item.visible,
        activeStateChanged: service.activeChanged
      });
    }
  }
};

const templatesPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-distcomp:templates',
  description:
    'Commands that insert a %%distcomp spec cell for each launcher type.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    palette: ICommandPalette | null
  ) => {
    app.commands.addCommand(CommandIDs.insertTemplate, {
      label: args => {
        const template = TEMPLATES.find(t => t.launcher === args.launcher);
        return `Insert %%distcomp template: ${template?.label ?? 'component'}`;
      },
      caption: 'A new cell below with a distributed component spec to edit',
      describedBy: {
        args: {
          type: 'object',
          properties: {
            launcher: {
              type: 'string',
              enum: TEMPLATES.map(t => t.launcher),
              description:
                'The launcher of the template to insert (default: the first one)'
            }
          }
        }
      },
      isEnabled: () => tracker.currentWidget !== null,
      execute: args => {
        const panel = tracker.currentWidget;
        const template =
          TEMPLATES.find(t => t.launcher === args.launcher) ?? TEMPLATES[0];
        if (!panel) {
          return;
        }
        NotebookActions.insertBelow(panel.content);
        const cell = panel.content.activeCell;
        if (cell && cell.model.type !== 'code') {
          NotebookActions.changeCellType(panel.content, 'code');
        }
        panel.content.activeCell?.model.sharedModel.setSource(
          templateSource(template)
        );
      }
    });
    for (const template of TEMPLATES) {
      palette?.addItem({
        command: CommandIDs.insertTemplate,
        category: CATEGORY,
        args: { launcher: template.launcher }
      });
    }
  }
};

const rankViewPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-distcomp:rank-view',
  description:
    "A %%distcomp run cell's output: every rank's labelled lines, or one rank alone.",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker) => {
    const watch = (panel: NotebookPanel) =>
      void import('./rankView').then(view => view.watchNotebook(panel));
    tracker.widgetAdded.connect((_, panel) => watch(panel));
    tracker.forEach(watch);
  }
};

/** The open rich views of a rank's variables; disposed when the plugin is deactivated. */
let richViews: RankRichViews | null = null;

const richViewPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-distcomp:rich-view',
  description:
    "The debugger's magnifier opens the selected rank's variable, its title naming the rank.",
  autoStart: true,
  optional: [IDebugger],
  activate: (app: JupyterFrontEnd, service: IDebugger | null) => {
    if (!service) {
      return; // the debugger is disabled: no magnifier to follow
    }
    richViews = new RankRichViews(app.commands, app.shell, service, {
      command: Debugger.CommandIDs.renderMimeVariable,
      isView: widget => widget instanceof Debugger.VariableRenderer
    });
  },
  deactivate: () => {
    richViews?.dispose();
    richViews = null;
  }
};

export default [
  editorPlugin,
  ranksPlugin,
  templatesPlugin,
  rankViewPlugin,
  richViewPlugin
];
