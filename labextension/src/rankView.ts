/**
 * The per-rank view of `%%distcomp run` cells: above the output, "all ranks" (the labelled
 * lines, as the kernel sent them) or one button per rank, which shows that rank's output
 * alone, without labels. Switching re-reads the cell's outputs: nothing is re-run, and the
 * choice stays for the cell's next run. The kernel's output is unchanged, so a plain-text
 * frontend (or JupyterLab without this extension) shows the labelled lines.
 *
 * The view is a widget of the cell's own layout, before its output wrapper, and only in run
 * cells: JupyterLab places each output in its output area by position among that area's
 * children, so nothing is ever added there, and every output lands where JupyterLab puts it.
 */
import { CodeCell } from '@jupyterlab/cells';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Panel, PanelLayout, Widget } from '@lumino/widgets';

import { IOutputLike, isRunCell, outputsOfRank, ranksOf } from './rankLines';

const ACTIVE = 'distcomp-rankview-active';
const SELECTED = 'distcomp-rankview-selected';
/** JupyterLab's panel of a code cell's output collapser and output area */
const OUTPUT_WRAPPER = 'jp-Cell-outputWrapper';
/** JupyterLab's class of one output of an output area */
const OUTPUT_CLASS = 'jp-OutputArea-output';
/** the view follows a streaming cell at most this often (a burst re-reads its output) */
const REDRAW_MS = 150;

/** The view of one run cell (hidden until it shows the output of two ranks or more). */
class RankView extends Panel {
  readonly bar = document.createElement('div');
  /** the rank's output, shown alone */
  readonly body = new Panel();
  /** the rank shown alone, or null for all ranks */
  rank: number | null = null;
  private ranks: number[] = [];
  private scheduled = false;

  constructor(readonly cell: CodeCell) {
    super();
    this.addClass('distcomp-rankview');
    this.bar.className = 'distcomp-rankview-bar';
    this.bar.hidden = true;
    this.addWidget(new Widget({ node: this.bar }));
    this.body.addClass('distcomp-rankview-body');
    this.addWidget(this.body);
    cell.outputArea.model.changed.connect(this.schedule, this);
    cell.model.contentChanged.connect(this.schedule, this); // also text added to a stream
    cell.model.metadataChanged.connect(this.schedule, this); // outputs hidden or shown
    this.update();
  }

  /** Before the cell's output wrapper, once the cell has built it. */
  place(): void {
    const layout = this.cell.layout as PanelLayout;
    const wrapper = layout.widgets.find(widget =>
      widget.hasClass(OUTPUT_WRAPPER)
    );
    if (wrapper && this.parent !== this.cell) {
      layout.insertWidget(layout.widgets.indexOf(wrapper), this);
    }
  }

  dispose(): void {
    if (!this.isDisposed && !this.cell.isDisposed) {
      this.cell.removeClass(ACTIVE);
    }
    super.dispose();
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

  update(): void {
    if (this.isDisposed || this.cell.isDisposed) {
      return;
    }
    const outputs = this.cell.model.outputs.toJSON() as IOutputLike[];
    const ranks = ranksOf(outputs);
    if (ranks.length < 2 || this.cell.outputHidden) {
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
    for (const widget of [...this.body.widgets]) {
      widget.dispose();
    }
    this.cell.toggleClass(ACTIVE, rank !== null);
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
      // styled as the cell's own outputs: long lines wrap there as here
      renderer.addClass(OUTPUT_CLASS);
      renderer.addClass('distcomp-rankview-item');
      void renderer.renderModel({
        data,
        metadata,
        trusted: this.cell.model.trusted,
        setData: () => undefined
      } as never);
      this.body.addWidget(renderer);
    }
  }
}

const views = new WeakMap<CodeCell, RankView>();
const followed = new WeakSet<CodeCell>();
const watched = new WeakSet<NotebookPanel>();

/** A view while the cell is a run cell; none (nothing added to the cell) otherwise. */
function follow(cell: CodeCell): void {
  if (followed.has(cell)) {
    return;
  }
  followed.add(cell);
  const check = () => {
    if (cell.isDisposed) {
      return;
    }
    const run = isRunCell(cell.model.sharedModel.getSource());
    let view = views.get(cell);
    if (run && !view) {
      view = new RankView(cell);
      views.set(cell, view);
    } else if (!run && view) {
      view.dispose();
      views.delete(cell);
      return;
    }
    view?.place();
  };
  cell.model.contentChanged.connect(check);
  void cell.ready.then(check);
}

/** A per-rank view on each run cell of ``panel``, also on the cells added later. */
export function watchNotebook(panel: NotebookPanel): void {
  if (watched.has(panel)) {
    return;
  }
  watched.add(panel);
  const scan = () => {
    for (const cell of panel.content.widgets) {
      if (cell instanceof CodeCell) {
        follow(cell);
      }
    }
  };
  void panel.context.ready.then(() => {
    scan();
    panel.content.model?.cells.changed.connect(() => setTimeout(scan, 0));
  });
}
