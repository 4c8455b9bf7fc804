/**
 * The ranks sidebar and the "distcomp: N ranks" status bar item, for the active notebook.
 * Plain DOM: the panel is a few tables redrawn on each change, a handful of times a second
 * at most, so React would add weight and nothing else.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { confirmation } from './confirm';
import { RANK_ACTION, RANK_STATE } from './contracts';
import { IWorld, RankAction } from './messages';
import { KernelRanks, RanksService } from './ranks';
import { rankColumns, stepOnlyNote, stepOnlyToggle } from './stepOnly';

const ICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16"><g class="jp-icon3" fill="#616161">' +
  '<rect x="1" y="2" width="6" height="5" rx="1"/><rect x="9" y="2" width="6" height="5" rx="1"/>' +
  '<rect x="1" y="9" width="6" height="5" rx="1"/><rect x="9" y="9" width="6" height="5" rx="1"/></g></svg>';

export const ranksIcon = new LabIcon({
  name: 'jupyter-distcomp:ranks',
  svgstr: ICON_SVG
});

const ACTIONS: [RankAction, string, string][] = [
  [
    RANK_ACTION.interrupt,
    'Interrupt',
    'SIGINT to the busy ranks (interrupts the running cell)'
  ],
  [
    RANK_ACTION.restart,
    'Restart',
    'Stop the ranks and start a fresh world with the current settings'
  ],
  [RANK_ACTION.stop, 'Stop', 'Stop every rank of this component']
];

export class RanksPanel extends Widget {
  constructor(private service: RanksService) {
    super();
    this.id = 'jupyter-distcomp-ranks';
    this.addClass('distcomp-ranks-panel');
    this.title.icon = ranksIcon;
    this.title.caption = 'distcomp ranks';
    service.activeChanged.connect(this.render, this);
    this.render();
  }

  render(): void {
    const ranks = this.service.active;
    const node = this.node;
    node.textContent = '';
    node.appendChild(
      element('h2', 'distcomp-ranks-title', 'Distributed ranks')
    );
    if (!ranks) {
      node.appendChild(
        element(
          'p',
          'distcomp-ranks-empty',
          'Open a notebook to see its ranks.'
        )
      );
      return;
    }
    if (!ranks.connected) {
      node.appendChild(
        element(
          'p',
          'distcomp-ranks-empty',
          'This kernel has not loaded jupyter_distcomp (%load_ext jupyter_distcomp).'
        )
      );
      return;
    }
    if (ranks.worlds.size === 0) {
      node.appendChild(
        element(
          'p',
          'distcomp-ranks-empty',
          'No running ranks. A %%distcomp run cell starts them.'
        )
      );
    }
    ranks.worlds.forEach(world =>
      node.appendChild(this.renderWorld(ranks, world))
    );
    if (ranks.message) {
      node.appendChild(element('p', 'distcomp-ranks-message', ranks.message));
    }
  }

  private renderWorld(ranks: KernelRanks, world: IWorld): HTMLElement {
    const section = element('section', 'distcomp-world');
    section.dataset.name = world.name;
    const size = world.ranks.length;
    section.appendChild(element('h3', 'distcomp-world-name', world.name));
    section.appendChild(
      element(
        'div',
        'distcomp-world-layout',
        `${world.instance_count} node${world.instance_count === 1 ? '' : 's'} x ${world.process_count_per_node} process${world.process_count_per_node === 1 ? '' : 'es'} per node = ${size} rank${size === 1 ? '' : 's'}`
      )
    );
    if (world.pending) {
      // the settings changed while these ranks run: news, not an error
      section.appendChild(
        element('div', 'distcomp-world-pending', world.pending)
      );
    }
    if (world.hang) {
      // the hang notice's words: what the ranks wait for, and the fix
      section.appendChild(element('div', 'distcomp-world-hang', world.hang));
    }
    const buttons = element('div', 'distcomp-world-actions');
    for (const [action, label, caption] of ACTIONS) {
      const button = element(
        'button',
        `jp-mod-styled distcomp-ranks-${action}`,
        label
      ) as HTMLButtonElement;
      button.title = caption;
      button.setAttribute('aria-label', `${label} the ranks of ${world.name}`);
      button.onclick = () => void confirmThen(action, world, ranks);
      buttons.appendChild(button);
    }
    if (world.background) {
      section.appendChild(
        element(
          'div',
          'distcomp-world-background',
          'A background cell runs on these ranks.'
        )
      );
      const where = element(
        'button',
        'jp-mod-styled distcomp-ranks-where',
        'Where'
      ) as HTMLButtonElement;
      where.title = "Each rank's current stack (%distcomp where)";
      where.onclick = () => ranks.request(RANK_ACTION.where, world.name);
      buttons.appendChild(where);
    }
    section.appendChild(buttons);
    const table = element('table', 'distcomp-rank-table');
    const head = element('tr');
    const debugging = world.ranks.some(r => r.state === RANK_STATE.debugging);
    const nodes = new Set(world.ranks.map(r => r.node)).size;
    // a GPU column where a rank holds GPU memory: its devices, memory in use and peak
    const gpu = world.ranks.some(r => r.gpu);
    const columns = rankColumns(debugging, nodes, gpu);
    columns.forEach(h => head.appendChild(element('th', '', h)));
    table.appendChild(head);
    for (const rank of world.ranks) {
      const row = element('tr', 'distcomp-rank');
      row.dataset.rank = String(rank.rank);
      row.dataset.state = rank.state;
      row.title = `rank ${rank.rank}: node ${rank.node}, local rank ${rank.local_rank}`;
      for (const column of columns) {
        if (column === 'step') {
          row.appendChild(this.stepOnlyCell(ranks, rank.rank, rank.state));
        } else if (column === 'state') {
          row.appendChild(
            element(
              'td',
              `distcomp-rank-state distcomp-state-${rank.state}`,
              rank.state
            )
          );
        } else if (column === 'pid') {
          row.appendChild(
            element(
              'td',
              'distcomp-rank-pid',
              rank.pid === null ? '' : String(rank.pid)
            )
          );
        } else if (column === 'gpu') {
          row.appendChild(element('td', 'distcomp-rank-gpu', rank.gpu ?? ''));
        } else {
          const value = {
            rank: rank.rank,
            node: rank.node,
            local: rank.local_rank
          };
          row.appendChild(element('td', '', String(value[column])));
        }
      }
      table.appendChild(row);
    }
    section.appendChild(table);
    const note = stepOnlyNote(ranks.stepOnly);
    if (note && debugging) {
      section.appendChild(element('div', 'distcomp-step-only-note', note));
    }
    if (ranks.where?.name === world.name) {
      section.appendChild(element('pre', 'distcomp-where', ranks.where.text));
    }
    return section;
  }

  /** A stopped rank's "this rank only" toggle for JupyterLab's debugger. */
  private stepOnlyCell(
    ranks: KernelRanks,
    rank: number,
    state: string
  ): HTMLElement {
    const cell = element('td', 'distcomp-rank-step');
    if (state !== RANK_STATE.debugging) {
      return cell;
    }
    const toggle = stepOnlyToggle(rank, ranks.stepOnly);
    const button = element(
      'button',
      'jp-mod-styled distcomp-step-only',
      toggle.label
    ) as HTMLButtonElement;
    button.title = toggle.title;
    button.setAttribute('aria-pressed', String(toggle.pressed));
    button.onclick = () => void ranks.setStepOnly(toggle.pressed ? null : rank);
    cell.appendChild(button);
    return cell;
  }
}

/** Ask first when `action` would lose the ranks' state (confirm.ts), then request it. */
async function confirmThen(
  action: RankAction,
  world: IWorld,
  ranks: KernelRanks
): Promise<void> {
  const question = confirmation(action, world);
  if (question) {
    const result = await showDialog({
      title: question.title,
      body: question.body,
      buttons: [
        Dialog.cancelButton(),
        Dialog.warnButton({ label: question.label })
      ]
    });
    if (!result.button.accept) {
      return;
    }
  }
  ranks.request(action, world.name);
}

/** "distcomp: N ranks" in the status bar; a click shows the panel. */
export class RanksStatus extends Widget {
  constructor(
    private service: RanksService,
    onClick: () => void
  ) {
    super();
    this.addClass('distcomp-ranks-status');
    this.node.title = 'Ranks of this notebook (click for the ranks panel)';
    this.node.onclick = onClick;
    service.activeChanged.connect(this.render, this);
    this.render();
  }

  /** Shown only for a kernel that loaded jupyter_distcomp. */
  get visible(): boolean {
    return this.service.active?.connected ?? false;
  }

  render(): void {
    const ranks = this.service.active;
    const count = ranks?.rankCount ?? 0;
    const all = [...(ranks?.worlds.values() ?? [])].flatMap(w => w.ranks);
    const busy = all.filter(r => r.state === RANK_STATE.busy).length;
    const starting = all.filter(r => r.state === RANK_STATE.starting).length;
    const debugging = all.filter(r => r.state === RANK_STATE.debugging).length;
    const notes = [
      busy ? `${busy} busy` : '',
      debugging ? `${debugging} debugging` : ''
    ].filter(Boolean);
    this.node.textContent = starting
      ? `distcomp: starting ${count - starting} of ${count}`
      : `distcomp: ${count} rank${count === 1 ? '' : 's'}${notes.length ? ` (${notes.join(', ')})` : ''}`;
  }
}

function element(tag: string, className = '', text = ''): HTMLElement {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text) {
    node.textContent = text;
  }
  return node;
}
