/**
 * The per-rank view of `%%distcomp run` cells: above the output, "all ranks" (the labelled
 * lines, as the kernel sent them) or one button per rank, which shows that rank's output
 * alone, without labels. Switching re-reads the cell's outputs: nothing is re-run, and the
 * choice stays for the cell's next run. The kernel's output is unchanged, so a plain-text
 * frontend (or JupyterLab without this extension) shows the labelled lines.
 */
import { CodeCell } from '@jupyterlab/cells';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import { IOutputLike, isRunCell, outputsOfRank, ranksOf } from './rankLines';

const ACTIVE = 'distcomp-rankview-active';
const SELECTED = 'distcomp-rankview-selected';
/** the view follows a streaming cell at most this often (a burst re-reads its output) */
const REDRAW_MS = 150;

/** The view of one code cell (hidden until it shows the output of two ranks or more). */
class RankView {
  readonly bar = document.createElement('div');
  readonly body = document.createElement('div');
  /** the rank shown alone, or null for all ranks */
  rank: number | null = null;
  private ranks: number[] = [];
  private shown: Widget[] = [];
  private scheduled = false;

  constructor(readonly cell: CodeCell) {
    this.bar.className = 'distcomp-rankview-bar';
    this.body.className = 'distcomp-rankview-body';
    this.bar.hidden = true;
    this.place();
    cell.outputArea.model.changed.connect(this.schedule, this);
    cell.model.contentChanged.connect(this.schedule, this);
    this.update();
  }

  schedule(): void {
    if (this.scheduled) {
      return;
    }
    this.scheduled = true;
    setTimeout(() => {
      this.scheduled = false;
      this.update();
    }, REDRAW_MS);
  }

  select(rank: number | null): void {
    this.rank = rank;
    this.update();
  }

  /** The bar and the rank's output first in the output area, before the outputs. */
  private place(): void {
    const area = this.cell.outputArea.node;
    if (area.firstChild !== this.bar || this.bar.nextSibling !== this.body) {
      area.insertBefore(this.body, area.firstChild);
      area.insertBefore(this.bar, this.body);
    }
  }

  update(): void {
    if (this.cell.isDisposed) {
      return;
    }
    this.place();
    const run = isRunCell(this.cell.model.sharedModel.getSource());
    const outputs = run
      ? (this.cell.model.outputs.toJSON() as IOutputLike[])
      : [];
    const ranks = run ? ranksOf(outputs) : [];
    if (ranks.length < 2) {
      this.bar.hidden = true;
      this.render(null, outputs); // the choice is kept for the cell's next output
      return;
    }
    this.bar.hidden = false;
    if (ranks.join() !== this.ranks.join()) {
      this.ranks = ranks;
      this.buttons();
    }
    for (const button of Array.from(this.bar.querySelectorAll('button'))) {
      const value =
        button.dataset.rank === 'all' ? null : Number(button.dataset.rank);
      button.classList.toggle(SELECTED, value === this.rank);
    }
    this.render(
      this.rank !== null && ranks.includes(this.rank) ? this.rank : null,
      outputs
    );
  }

  private buttons(): void {
    this.bar.replaceChildren();
    const title = document.createElement('span');
    title.className = 'distcomp-rankview-title';
    title.textContent = 'ranks:';
    this.bar.appendChild(title);
    const add = (text: string, rank: number | null, hint: string) => {
      const button = document.createElement('button');
      button.textContent = text;
      button.title = hint;
      button.dataset.rank = rank === null ? 'all' : String(rank);
      button.onclick = () => this.select(rank);
      this.bar.appendChild(button);
    };
    add('all', null, 'every rank, each line labelled');
    for (const rank of this.ranks) {
      add(String(rank), rank, `rank ${rank} alone`);
    }
  }

  private render(rank: number | null, outputs: IOutputLike[]): void {
    for (const widget of this.shown) {
      widget.dispose();
    }
    this.shown = [];
    this.body.replaceChildren();
    this.cell.outputArea.node.classList.toggle(ACTIVE, rank !== null);
    if (rank === null) {
      return;
    }
    const rendermime = this.cell.outputArea.rendermime;
    for (const item of outputsOfRank(outputs, rank)) {
      let data: Record<string, unknown>;
      let metadata: Record<string, unknown> = {};
      if (item.kind === 'text') {
        data = { [`application/vnd.jupyter.${item.stream}`]: item.text };
      } else if (item.output.output_type === 'error') {
        const traceback = (item.output.traceback as string[] | undefined) ?? [];
        data = { 'application/vnd.jupyter.stderr': traceback.join('\n') };
      } else {
        data = item.output.data ?? {};
        metadata = item.output.metadata ?? {};
      }
      const mime = rendermime.preferredMimeType(data as never, 'any');
      if (!mime) {
        continue;
      }
      const renderer = rendermime.createRenderer(mime);
      renderer.addClass('distcomp-rankview-item');
      void renderer.renderModel({
        data,
        metadata,
        trusted: this.cell.model.trusted,
        setData: () => undefined
      } as never);
      Widget.attach(renderer, this.body);
      this.shown.push(renderer);
    }
  }
}

const views = new WeakMap<CodeCell, RankView>();
const watched = new WeakSet<NotebookPanel>();

/** A per-rank view on each code cell of ``panel``, also on the cells added later. */
export function watchNotebook(panel: NotebookPanel): void {
  if (watched.has(panel)) {
    return;
  }
  watched.add(panel);
  const scan = () => {
    for (const cell of panel.content.widgets) {
      if (cell instanceof CodeCell && !views.has(cell)) {
        views.set(cell, new RankView(cell));
      }
    }
  };
  void panel.context.ready.then(() => {
    scan();
    panel.content.model?.cells.changed.connect(() => setTimeout(scan, 0));
  });
}
